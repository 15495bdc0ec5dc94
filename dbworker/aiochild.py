"""Inside an async handler process: one event loop running up to ``capacity`` items at once,
each a coroutine with its own ``AsyncSession``, claim token and fenced commit (docs/async.md).

The pipe protocol is ``child``'s; here a cancel ends a running coroutine (its claim was lost)
and the process also sends health (loop lag, items in flight) from ``loopwatch``. The SQL of
the fenced commit and of failures is ``sql.items``', run on the async connection through
``run_sync``; what outcomes mean for the item is the coordinator's. Like ``child``, it never
imports the loop, the pool or the coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.pool import SingletonThreadPool, StaticPool

from dbworker import aiorows, attemptlogs, child, loopwatch, messages, progress, redact, tracing
from dbworker.contract import AsyncHandler, ExecutionStatus, Finished, LostClaim, Unfinished
from dbworker.contract import Outcome as HandlerOutcome
from dbworker.messages import DELETED, FINISHED, LOST, RETRY, TIMED_OUT, UNFINISHED, Outcome, Report
from dbworker.sql import claimer, dialects, drivers, failures, history, items, statements, tables
from dbworker.sql import progress as stored_progress

if TYPE_CHECKING:  # imported where used: SQLAlchemy's asyncio needs greenlet (the `async` extra)
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

log = logging.getLogger("dbworker")
_TASK_PREFIX = "dbworker-item-"  # + the claim token: how the loop watch names the item that blocks


def _token(task_name: str | None) -> str | None:
    return task_name[len(_TASK_PREFIX):] if task_name and task_name.startswith(_TASK_PREFIX) else None


@dataclass
class _Item:
    """What one running item has gathered, for its report."""

    claim: items.Claim
    attempt: history.Attempt
    progress: progress.Coalesced  # its reports (``dbworker.report_progress()``), written by a task of their own
    exc: BaseException | None = None
    traceback: str | None = None
    after: float | None = None
    cancelled: bool = field(default=False)  # ended by a cancel: its claim is no longer ours


class AsyncRunner:
    """Runs items of one worker as coroutines on one async engine (``engine``: the caller's)."""

    def __init__(self, config: child.ChildConfig, *, engine: AsyncEngine | None = None) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.config = config
        self._own_engine = engine is None
        self.engine = engine or create_async_engine(
            drivers.async_url(config.database_url), **drivers.async_engine_options(config.engine_options, config.capacity)
        )
        self.table = tables.work_table(config.worker, config.source)
        self.secrets = redact.url_secrets(config.database_url)
        self.history = history.history_table(self.table) if config.history else None
        self.claimed_by = claimer.identity(config.parent_pid)
        self._complete = items.Completer(self.table)
        self._load = statements.load_source(config.source)
        self._reads_in_autocommit = self.engine.dialect.name == "postgresql"
        self._rows = aiorows.RowLoader(self.engine, config.source, autocommit=self._reads_in_autocommit)
        self.running: dict[str, asyncio.Task[Report]] = {}
        # Each item's log records, kept with its attempt: one Capture, a context of its own per item's task.
        self._capture: attemptlogs.Capture | None = None
        if config.history_logs and config.history:
            self._capture = attemptlogs.Capture(self.secrets + (config.log[2] if config.log else ()))
            logging.getLogger().addHandler(self._capture)
        self._tracer = tracing.tracer() if config.tracing else None
        self._source_table = tables.source_key(config.source).table.name  # the spans' attribute

    async def warm_up(self) -> None:
        """Connect and compile the hot statements before the first item (as ``child.Runner``)."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(self._load, {"dbw_key": None})
                await conn.run_sync(self._complete.prepare)
        except Exception:  # noqa: BLE001 - the first item retries and reports what fails
            pass

    def start(self, claim: items.Claim, done: Callable[[Report], None]) -> None:
        """Run ``claim`` as a task of the running loop; ``done`` gets its report."""
        task = asyncio.get_running_loop().create_task(self.run(claim), name=f"{_TASK_PREFIX}{claim.token}")
        self.running[claim.token] = task

        def finished(t: asyncio.Task[Report]) -> None:
            self.running.pop(claim.token, None)
            done(t.result())

        task.add_done_callback(finished)

    def cancel(self, token: str) -> bool:
        """End the coroutine of the claim ``token`` (lost: cancelled or taken over); its writes roll back."""
        task = self.running.get(token)
        if task is None:
            return False
        task.cancel(msg="the claim is no longer ours")
        return True

    async def run(self, claim: items.Claim) -> Report:
        """Run ``claim``'s handler and commit its outcome; in a ``process`` span of its own when
        tracing (the child of the coordinator's claim span), current in this item's task only."""
        if self._tracer is None:
            return (await self._run(claim))[0]
        with tracing.process_span(self._tracer, self.config.worker, self._source_table, claim.source_id, pod=self.claimed_by,
                                  parent=claim.trace) as span:  # fmt: skip
            report, exc = await self._run(claim)
            tracing.process_ended(span, report, exc)
            return report

    async def _run(self, claim: items.Claim) -> tuple[Report, BaseException | None]:
        """The report, and the exception the attempt ended with (None: none). The attempt's
        log records and progress reports are this task's own (context variables)."""
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            records = None if self._capture is None else stack.enter_context(self._capture.attempt())
            item = _Item(claim, history.Attempt(self.history, history.utcnow(), self.claimed_by,
                                                None if records is None else records.text,
                                                None if self._tracer is None else tracing.recording_ids()),
                         progress.Coalesced(lambda fraction, note: self._report(claim, fraction, note)))  # fmt: skip
            stack.enter_context(progress.running(item.progress))
            try:
                outcome, error = await self._execute(item)
            except asyncio.CancelledError:
                item.progress.drop()
                outcome, error = await self._gone_or(claim, (LOST, None))
        summary = redact.describe(item.exc, self.secrets) if item.exc is not None else ""
        return Report(claim.source_id, claim.token, outcome, time.perf_counter() - start, error, summary,
                      item.traceback, item.after), item.exc  # fmt: skip

    async def _report(self, claim: items.Claim, fraction: float | None, note: str | None) -> None:
        """Write one progress report on a short connection of its own (as ``child.Runner``)."""
        if isinstance(self.engine.pool, StaticPool | SingletonThreadPool):
            return
        try:
            async with self.engine.connect() as conn:
                await conn.run_sync(lambda c: stored_progress.write(
                    c, self.table, claim.source_id, claim.token, fraction=fraction,
                    note=None if note is None else redact.redact(note, self.secrets)))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a report lost is not the handler's failure
            progress.not_recorded(self.config.worker, claim.source_id, redact.describe(exc, self.secrets))

    def _describe(self, item: _Item, exc: BaseException) -> str:
        item.exc = exc
        error, item.traceback = child.describe(exc, self.secrets)
        return error

    async def _execute(self, item: _Item) -> tuple[Outcome, str | None]:
        claim, retry = item.claim, self.config.retry
        if retry is not None and not await self._attempt_allowed(claim, retry.max_attempts):
            return messages.FAILED, "handler process died on its last allowed attempt (its lease expired)"
        from sqlalchemy.ext.asyncio import AsyncSession

        session = AsyncSession(self.engine, sync_session_class=child.HandlerSession, expire_on_commit=False)
        try:
            try:
                row = await self._load_row(session, claim)
                # The handler gets its own coroutine's deadline; a cancel (lost claim) comes as CancelledError.
                async with asyncio.timeout(self.config.timeout):
                    result = await cast(AsyncHandler, self.config.handler)(row, session)
                if not isinstance(result, Finished | Unfinished):
                    raise TypeError(f"handler returned {result!r}; it must return Finished() or Unfinished()")
                await session.flush()
            except asyncio.CancelledError:
                await _rollback(session)
                raise
            except TimeoutError as exc:
                await _rollback(session)
                error = f"handler timed out after {self.config.timeout:g} s"
                item.exc = exc
                return await self._gone_or(claim, await self._record_failure(item, error, None, final=TIMED_OUT))
            except BaseException as exc:  # noqa: BLE001 - whatever the handler raises fails its attempt
                await _rollback(session)
                if isinstance(exc, sa.exc.SQLAlchemyError) and dialects.is_transient(exc):
                    return RETRY, self._describe(item, exc)
                error = self._describe(item, exc)
                return await self._gone_or(claim, await self._record_failure(item, error, exc))
            return await self._commit(session, item, result)
        finally:
            await asyncio.shield(session.close())  # rolls back whatever is left; never commits

    async def _load_row(self, session: AsyncSession, claim: items.Claim) -> Any:
        """The claimed row, attached to ``session`` with no connection held: the handler's
        session connects again when it uses it (so items waiting on I/O hold none). Read
        with the rows of the other items started in the same turn of the loop (``aiorows``),
        else alone.

        The read's transaction ends before the handler runs either way, so on PostgreSQL it
        runs in autocommit (``dialects.connect_reads``): one round trip instead of BEGIN, the
        read and ROLLBACK (psycopg switches autocommit on the client and skips the ROLLBACK of
        an idle connection)."""
        row = await self._rows.get(claim.source_id)
        if row is not aiorows.AGAIN:
            session.add(row)
            return row
        if self._reads_in_autocommit:
            await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        row = (await session.execute(self._load, {"dbw_key": claim.source_id})).scalar_one_or_none()
        if row is None:
            raise LookupError(f"source row {claim.source_id!r} of {self.config.source.__name__} no longer exists")
        session.expunge(row)
        await session.rollback()
        session.add(row)
        return row

    async def _commit(self, session: AsyncSession, item: _Item, result: HandlerOutcome) -> tuple[Outcome, str | None]:
        """The fenced commit: the handler's writes and the outcome, only while the claim is current."""
        claim = item.claim
        after = result.after_seconds if isinstance(result, Unfinished) else None
        try:
            await item.progress.flush()  # its last report is written before the outcome
            conn = await session.connection()
            if after:
                current = await conn.run_sync(lambda c: items.unfinish(c, self.table, claim, after=after))
                item.after = after
            else:
                status = ExecutionStatus.FINISHED if isinstance(result, Finished) else ExecutionStatus.UNFINISHED
                current = await conn.run_sync(lambda c: self._complete(c, claim, status, item.attempt))
            if not current:
                await _rollback(session)
                item.exc = LostClaim(f"the claim of item {claim.source_id!r} is no longer ours")
                return await self._gone_or(claim, (LOST, None))
            if after:  # the completer records the attempt itself
                await conn.run_sync(lambda c: item.attempt.record(c, claim.source_id, UNFINISHED.value))
            session.sync_session.info[child.MAY_COMMIT] = True
            await session.commit()
        except asyncio.CancelledError:
            await _rollback(session)
            raise
        except Exception as exc:  # noqa: BLE001 - not committed: given back
            await _rollback(session)
            return RETRY, self._describe(item, exc)
        return (FINISHED if isinstance(result, Finished) else UNFINISHED), None

    async def _attempt_allowed(self, claim: items.Claim, max_attempts: int) -> bool:
        """As ``child.Runner._attempt_allowed``: False (recorded FAILED) when this claim took
        over an item whose last allowed attempt died with its process."""
        try:
            async with self.engine.connect() as conn:
                return await conn.run_sync(
                    lambda c: child.attempt_allowed(c, self.table, claim, max_attempts, self.history, self.claimed_by)
                )
        except Exception:  # noqa: BLE001 - the run itself meets and reports what fails
            return True

    async def _gone_or(self, claim: items.Claim, result: tuple[Outcome, str | None]) -> tuple[Outcome, str | None]:
        """``result``, or ``DELETED`` for a lost claim whose source row no longer exists."""
        if result[0] != LOST:
            return result
        try:
            async with self.engine.connect() as conn:
                gone = (await conn.execute(self._load, {"dbw_key": claim.source_id})).first() is None
                await conn.rollback()
        except Exception:  # noqa: BLE001 - then it is reported as the lost claim it is
            return result
        return (DELETED, None) if gone else result

    async def _record_failure(self, item: _Item, error: str, exc: BaseException | None, *,
                              final: Outcome = messages.FAILED) -> tuple[Outcome, str | None]:  # fmt: skip
        """Record the failed attempt (retried if the worker's Retry allows, else ``final``)."""
        await item.progress.flush()  # its last report is kept with the failure
        try:
            async with self.engine.connect() as conn:
                outcome, item.after = await conn.run_sync(lambda c: failures.failed_attempt(
                    c, self.table, item.claim, error=error, traceback=item.traceback, retry=self.config.retry,
                    exc=exc, final=final, attempt_record=item.attempt,
                ))  # fmt: skip
        except Exception:  # noqa: BLE001 - not recorded: given back
            return RETRY, error
        return outcome, error

    async def close(self) -> None:
        if self._capture is not None:
            logging.getLogger().removeHandler(self._capture)
        if self._own_engine:
            await self.engine.dispose()


async def _rollback(session: AsyncSession) -> None:
    try:
        await asyncio.shield(session.rollback())
    except Exception:  # noqa: BLE001 - the connection goes; the transaction with it
        pass


def main(config: child.ChildConfig, conn: Any) -> None:
    """Entry point of an async handler process: serve items from ``conn`` until told to stop."""
    child.prepare_process(config)
    asyncio.run(_serve(config, conn))


async def _serve(config: child.ChildConfig, conn: Any) -> None:
    loop = asyncio.get_running_loop()
    runner = AsyncRunner(config)
    await runner.warm_up()
    send_lock = threading.Lock()

    def send(message: Any) -> None:
        with send_lock:
            try:
                conn.send(message)
            except OSError:
                pass  # the coordinator went away: the parent watch ends this process

    stopped = asyncio.Event()
    finished: list[Report] = []

    def send_finished() -> None:
        batch = finished[:]
        finished.clear()
        if batch:
            send((messages.DONES, batch))

    def done(report: Report) -> None:
        """Reports of one turn of the loop go back in one message (sent at its next turn)."""
        if not finished:
            loop.call_soon(send_finished)
        finished.append(report)

    def start(source_id: Any, token: str, trace: str | None) -> None:
        # trace: the claim span's, parent of the item's process span
        runner.start(items.Claim(source_id, token, trace=trace), done)

    def on_message(message: Any) -> None:
        if message is messages.STOP:
            stopped.set()
        elif message[0] == messages.CANCEL:
            runner.cancel(message[1])
        elif message[0] == messages.RUNS:
            for run in message[1]:
                start(*run)
        else:
            start(*message[1:])

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = messages.STOP
            loop.call_soon_threadsafe(on_message, message)
            if message is messages.STOP:
                return

    watch = loopwatch.LoopWatch(loop, in_flight=lambda: len(runner.running),
                                report=lambda lag, n, blocker: send((messages.HEALTH, lag, n, _token(blocker))))  # fmt: skip
    send((messages.READY,))
    threading.Thread(target=read, name="dbworker-inbox", daemon=True).start()
    watch.start()
    try:
        beat = asyncio.create_task(watch.beat())
        await stopped.wait()
        if runner.running:
            await asyncio.gather(*runner.running.values(), return_exceptions=True)
        beat.cancel()
    finally:
        send_finished()  # the last turn's reports, before the process ends
        watch.stop()
        await runner.close()
        tracing.flush()  # before the process ends: its spans reach the exporter

