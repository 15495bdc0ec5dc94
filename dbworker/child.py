"""Inside a handler process: its own engine, load the claimed row, call the handler, fenced commit.

A handler process serves one worker for its whole life, one item at a time, and never
imports the loop, the pool or the coordinator. It ignores SIGINT/SIGTERM (only its coordinator decides
when it ends) and exits by itself when its coordinator dies.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session
from sqlalchemy.pool import SingletonThreadPool, StaticPool

from dbworker import attemptlogs, logs, messages, orphans, progress, redact, tracing
from dbworker.contract import (
    AsyncHandler,
    ExecutionStatus,
    Finished,
    Handler,
    LostClaim,
    Unfinished,
)
from dbworker.messages import DELETED, FINISHED, LOST, RETRY, UNFINISHED, Outcome, Report
from dbworker.retries import Retry
from dbworker.sql import (
    claimer,
    dialects,
    failures,
    history,
    items,
    statements,
    tables,
    transactions,
)
from dbworker.sql import progress as stored_progress

MAY_COMMIT = "dbworker.may_commit"
_ENDS = "dbworker.ends"  # the session's transactions.EndWatch



@dataclass(frozen=True)
class ChildConfig:
    """What a handler process needs; pickled to it once when it starts."""

    worker: str
    database_url: str = field(repr=False)  # carries the password: never logged
    engine_options: dict[str, Any]
    handler: Handler | AsyncHandler
    source: Any
    parent_pid: int
    # The command's logging (level, format, extra secrets to mask), repeated here: None when
    # the library runs inside an application (handler processes then configure nothing).
    log: tuple[str, str, tuple[str, ...]] | None = field(default=None, repr=False)
    retry: Retry | None = None  # the worker's retry policy, for failures the handler raises
    # Async handlers (``aiochild``): the most items one process runs at once, and the seconds
    # a coroutine may run before it is cancelled (sync handlers' processes are killed by the pool).
    capacity: int = 1
    timeout: float | None = None
    history_logs: bool = True  # keep each attempt's log records with its history row
    history: bool = True  # record attempts at all (Coordinator(history_attempts=0): no)
    tracing: bool = False  # the coordinator traces: handler processes do too (``dbworker.tracing``)


class CommittedBehindOurBack(RuntimeError):
    """The handler ended dbworker's transaction itself (``COMMIT``, or a statement that
    commits implicitly): what it wrote until then is committed and cannot be undone."""


class HandlerSession(Session):
    """The session a handler receives: committing it is dbworker's job (see ``_guard_commit``)."""


@event.listens_for(HandlerSession, "before_commit")
def _guard_commit(session: Session) -> None:
    # An event, not an overridden commit(): `with session.begin():` commits without commit().
    if not session.info.get(MAY_COMMIT):
        raise RuntimeError(
            "dbworker owns the commit: return Finished() or Unfinished() and dbworker commits "
            "the handler's writes with the outcome (session.rollback() is allowed)"
        )


@event.listens_for(HandlerSession, "after_begin")
def _follow(session: Session, transaction: Any, connection: sa.Connection) -> None:
    # A handler that rolled its session back and goes on writes on the connection begun now.
    watch = session.info.get(_ENDS)
    if watch is not None:
        watch.follow(connection)


class Runner:
    """Runs items for one worker with one engine; separate from the process plumbing for tests."""

    def __init__(self, config: ChildConfig, *, engine: sa.Engine | None = None) -> None:
        self.config = config
        # No pool_pre_ping by default: it would cost a round trip per item, and a connection
        # lost meanwhile only makes that item's transaction fail transiently (given back,
        # retried) while the pool replaces the connection. ``engine``: run on the caller's
        # own (``dbworker.testing`` runs items in the calling process).
        self._own_engine = engine is None
        self.engine = sa.create_engine(config.database_url, **config.engine_options) if engine is None else engine
        self.table = tables.work_table(config.worker, config.source)
        self.secrets = redact.url_secrets(config.database_url)
        self.history = history.history_table(self.table) if config.history else None
        self.claimed_by = claimer.identity(config.parent_pid)  # the pod process that claims
        self._attempt = history.Attempt(self.history, None, self.claimed_by)
        # The handler's log records, kept with the attempt's history row: in memory until the
        # row is written with the outcome (the fenced commit, or the failure's own transaction
        # after the rollback), so they survive a rollback and a failure; a crash loses them.
        self._capture: attemptlogs.Capture | None = None
        if config.history_logs and config.history:
            self._capture = attemptlogs.Capture(self.secrets + (config.log[2] if config.log else ()))
            logging.getLogger().addHandler(self._capture)
        self._complete = items.Completer(self.table)
        # Built once: session.get() redoes per call what a fresh session never needs
        # (identity-map lookup, a new statement and its cache key).
        self._load = statements.load_source(config.source)
        # A handler's own COMMIT (session.execute(text("COMMIT"))) would pass the fence: seen
        # by the engine's statement events and failing the item (see CommittedBehindOurBack).
        self._ends = transactions.EndWatch()
        self._ends.attach(self.engine)
        self._tracer = tracing.tracer() if config.tracing else None
        self._source_table = tables.source_key(config.source).table.name  # the spans' attribute

    def warm_up(self) -> None:
        """Connect, configure the mappers and compile the hot statements before the first item.

        Otherwise the first item of every handler process pays for the connection (and the
        dialect's first-connect queries) and for compiling: tens of milliseconds of pick-up
        latency. A database that is down now only means the first item connects later.
        """
        try:
            with Session(self.engine) as session:
                session.execute(self._load, {"dbw_key": None}).all()  # matches no row
                self._complete.prepare(session.connection())
        except Exception:  # noqa: BLE001 - the first item retries and reports what fails
            pass

    def run(self, claim: items.Claim) -> Report:
        """Run ``claim``'s handler and commit its outcome; in a span of its own when tracing
        (the child of the coordinator's span of the claim), current while the handler runs."""
        if self._tracer is None:
            return self._run(claim)
        with tracing.process_span(self._tracer, self.config.worker, self._source_table, claim.source_id, pod=self.claimed_by,
                                  parent=claim.trace) as span:  # fmt: skip
            report = self._run(claim)
            tracing.process_ended(span, report, self._last_exc)
            return report

    def _run(self, claim: items.Claim) -> Report:
        start = time.perf_counter()
        self._last_exc: BaseException | None = None
        self._traceback: str | None = None
        self._after: float | None = None
        capture = self._capture
        self._attempt = history.Attempt(self.history, history.utcnow(), self.claimed_by,
                                        None if capture is None else capture.text,
                                        None if self._tracer is None else tracing.recording_ids())  # fmt: skip
        if capture is not None:
            capture.start()
        try:
            with progress.running(lambda fraction, note: self._report(claim, fraction, note)):
                outcome, error = self._execute(claim)
        finally:
            if capture is not None:
                capture.stop()
        summary = redact.describe(self._last_exc, self.secrets) if self._last_exc is not None else ""
        return Report(claim.source_id, claim.token, outcome, time.perf_counter() - start, error, summary,
                      self._traceback, self._after)  # fmt: skip

    def _report(self, claim: items.Claim, fraction: float | None, note: str | None) -> None:
        """``dbworker.report_progress()`` of the running handler: its own short transaction.

        Not on an engine whose pool hands out one shared connection (an in-memory SQLite
        database under ``dbworker.testing``): committing it would commit the handler's work.
        """
        if isinstance(self.engine.pool, StaticPool | SingletonThreadPool):
            return
        try:
            with self.engine.connect() as conn:
                stored_progress.write(conn, self.table, claim.source_id, claim.token, fraction=fraction,
                                      note=None if note is None else redact.redact(note, self.secrets))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a report lost is not the handler's failure
            progress.not_recorded(self.config.worker, claim.source_id, redact.describe(exc, self.secrets))

    def describe(self, exc: BaseException) -> tuple[str, str]:
        """The exception's text as the work record keeps it (``str(exc)``, else the class name)
        and its whole traceback, both masked.
        """
        return describe(exc, self.secrets)

    def _describe(self, exc: BaseException) -> str:
        self._last_exc = exc
        error, self._traceback = self.describe(exc)
        return error

    def _execute(self, claim: items.Claim) -> tuple[Outcome, str | None]:
        # No expiry at commit: the session closes right after, so reloading is never needed.
        retry = self.config.retry
        if retry is not None and not self._attempt_allowed(claim, retry.max_attempts):
            return messages.FAILED, "handler process died on its last allowed attempt (its lease expired)"
        session = HandlerSession(self.engine, expire_on_commit=False)
        try:
            try:
                row = session.execute(self._load, {"dbw_key": claim.source_id}).scalar_one_or_none()
                if row is None:
                    raise LookupError(
                        f"source row {claim.source_id!r} of {self.config.source.__name__} no longer exists"
                    )
                self._ends.start(session.connection())
                session.info[_ENDS] = self._ends
                try:
                    result = cast(Handler, self.config.handler)(row, session)
                    if not isinstance(result, Finished | Unfinished):
                        raise TypeError(
                            f"handler returned {result!r}; it must return Finished() or Unfinished()"
                        )
                    session.flush()
                finally:
                    ended = self._ends.stop()
                if ended is not None:
                    raise CommittedBehindOurBack(
                        f"the handler ended dbworker's transaction itself ({ended!r}): what it wrote "
                        "before that is committed and cannot be undone, so the item fails; dbworker "
                        "owns the commit: return Finished() or Unfinished() instead"
                    )
            except BaseException as exc:
                ended = self._ends.stop()
                _rollback(session)
                if ended is not None and not isinstance(exc, CommittedBehindOurBack):
                    exc = CommittedBehindOurBack(
                        f"the handler ended dbworker's transaction itself ({ended!r}) and then raised "
                        f"{type(exc).__name__}: {exc}; what it wrote before that is committed"
                    )
                if isinstance(exc, CommittedBehindOurBack):
                    return self._gone_or(claim, self._record_failure(claim, self._describe(exc), exc, final=True))
                # A database error of the handler's session that a later try may not meet
                # (connection lost, deadlock) is given back; what the handler's own code
                # raises (a ConnectionError of its HTTP client, ...) is a failed attempt.
                if isinstance(exc, sa.exc.SQLAlchemyError) and dialects.is_transient(exc):
                    return RETRY, self._describe(exc)
                return self._gone_or(claim, self._record_failure(claim, self._describe(exc), exc))
            after = result.after_seconds if isinstance(result, Unfinished) else None
            try:
                conn = session.connection()
                if after:  # not claimable again before ``after`` seconds (database clock)
                    current = items.unfinish(conn, self.table, claim, after=after)
                    self._after = after
                else:  # the hot path, precompiled; Unfinished() starts the next step's attempts
                    status = ExecutionStatus.FINISHED if isinstance(result, Finished) else ExecutionStatus.UNFINISHED
                    current = self._complete(conn, claim, status, self._attempt)
                if not current:
                    _rollback(session)
                    self._last_exc = LostClaim(f"the claim of item {claim.source_id!r} is no longer ours")
                    return self._gone_or(claim, (LOST, None))
                if after:
                    self._attempt.record(conn, claim.source_id, UNFINISHED.value)
                session.info[MAY_COMMIT] = True
                session.commit()
            except Exception as exc:
                _rollback(session)
                return RETRY, self._describe(exc)
            return (FINISHED if isinstance(result, Finished) else UNFINISHED), None
        finally:
            session.close()  # rolls back whatever is left; never commits

    def _attempt_allowed(self, claim: items.Claim, max_attempts: int) -> bool:
        """False (and the item recorded FAILED) when this claim took over an item whose last
        allowed attempt died with its process: taking over counts an attempt too.
        """
        try:
            with self.engine.connect() as conn:
                return attempt_allowed(conn, self.table, claim, max_attempts, self.history, self.claimed_by)
        except Exception:  # noqa: BLE001 - the run itself meets and reports what fails
            return True

    def _gone_or(self, claim: items.Claim, result: tuple[Outcome, str | None]) -> tuple[Outcome, str | None]:
        """``result``, or ``DELETED`` when it is a lost claim whose source row no longer exists
        (deleted while its handler ran: the work record went with it)."""
        if result[0] != LOST:
            return result
        try:
            with self.engine.connect() as conn:
                gone = conn.execute(self._load, {"dbw_key": claim.source_id}).first() is None
                conn.rollback()
        except Exception:  # noqa: BLE001 - then it is reported as the lost claim it is
            return result
        return (DELETED, None) if gone else result

    def _record_failure(
        self, claim: items.Claim, error: str, exc: BaseException, *, final: bool = False
    ) -> tuple[Outcome, str | None]:
        """Record the failed attempt (``final``: failed, whatever the worker's Retry says)."""
        try:
            with self.engine.connect() as conn:
                outcome, self._after = failures.failed_attempt(
                    conn, self.table, claim, error=error, traceback=self._traceback,
                    retry=None if final else self.config.retry, exc=exc, attempt_record=self._attempt,
                )  # fmt: skip
        except Exception:
            return RETRY, error
        return outcome, error

    def close(self) -> None:
        if self._capture is not None:
            logging.getLogger().removeHandler(self._capture)
        self._ends.detach(self.engine)
        if self._own_engine:
            self.engine.dispose()


def attempt_allowed(conn: sa.Connection, table: sa.Table, claim: items.Claim, max_attempts: int,
                    history_table: sa.Table | None, claimed_by: str) -> bool:  # fmt: skip
    """False, with the item recorded FAILED, when ``claim`` took over an item whose last
    allowed attempt died with its process (taking over counts an attempt too)."""
    attempt = failures.attempt_of(conn, table, claim)
    conn.rollback()
    if attempt is None or attempt <= max_attempts:
        return True
    failures.failed_attempt(conn, table, claim, error="handler process died on its last allowed "
                         f"attempt (attempt {attempt - 1} of {max_attempts}; its lease expired)",
                         attempt_record=history.Attempt(history_table, None, claimed_by))  # fmt: skip
    return False


def describe(exc: BaseException, secrets: tuple[str, ...]) -> tuple[str, str]:
    """``exc``'s text as the work record keeps it (``str(exc)``, else the class name) and its
    whole traceback, both masked."""
    text = redact.redact(str(exc) or type(exc).__name__, secrets)
    return text, redact.redact("".join(traceback.format_exception(exc)), secrets)


def prepare_process(config: ChildConfig) -> None:
    """What every handler process does first: ignore the signals only its coordinator may
    send, leave the terminal's process group, exit when orphaned, log like the command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the foreground group, not to us
    except OSError:
        pass
    orphans.watch(config.parent_pid)
    if config.tracing:  # the coordinator traces: so do we, exporting as the OTEL_* environment says
        tracing.tracer(env={**os.environ, "OTEL_TRACES_EXPORTER": os.environ.get("OTEL_TRACES_EXPORTER") or "otlp"})
    if config.log is not None:
        level, fmt, secrets = config.log
        logs.setup(level=level, fmt=fmt, secrets=secrets + redact.url_secrets(config.database_url), worker=config.worker)


def _rollback(session: Session) -> None:
    try:
        session.rollback()
    except Exception:
        pass


class Inbox:
    """Items from the coordinator, read by a thread of their own.

    So the coordinator can take back an item handed over behind a running one at any time
    (a stop, or a handler running long): a cancel that finds the item still waiting removes
    it and answers "skipped" at once; one that comes after the item started changes nothing.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()  # the main thread and the reader both answer
        self._cond = threading.Condition()
        self._items: collections.deque[tuple[Any, str, str | None]] = collections.deque()
        self._closed = False

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self._conn.send(message)

    def read(self) -> None:
        """The reader thread: until the coordinator says stop or goes away."""
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                message = None
            if message is messages.STOP:
                with self._cond:
                    self._closed = True
                    self._cond.notify()
                return
            if message[0] == messages.CANCEL:
                token = message[1]
                with self._cond:
                    waiting = [item for item in self._items if item[1] == token]
                    for item in waiting:
                        self._items.remove(item)
                if waiting:
                    self.send((messages.SKIPPED, token))
                continue
            _, source_id, token, trace = message
            with self._cond:
                self._items.append((source_id, token, trace))
                self._cond.notify()

    def next(self) -> tuple[Any, str, str | None] | None:
        """The next item to run, or None once the coordinator said stop (or went away)."""
        with self._cond:
            while not self._items and not self._closed:
                self._cond.wait()
            return self._items.popleft() if self._items else None


def main(config: ChildConfig, conn: Any) -> None:
    """Entry point of a handler process: serve items from ``conn`` until told to stop."""
    prepare_process(config)
    runner = Runner(config)
    runner.warm_up()
    inbox = Inbox(conn)
    inbox.send((messages.READY,))
    threading.Thread(target=inbox.read, name="dbworker-inbox", daemon=True).start()
    try:
        while (item := inbox.next()) is not None:
            source_id, token, trace = item
            report = runner.run(items.Claim(source_id, token, trace=trace))
            inbox.send((messages.DONE, report))
    finally:
        runner.close()
        tracing.flush()  # before the process ends: its spans reach the exporter
