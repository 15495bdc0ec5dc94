"""A registered worker (frozen) and the ``coordinator.workers[name]`` view over its records.

The view answers questions about one worker's work table through the caller's session;
it never commits (the caller does).
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import bounds
from dbworker.contract import AsyncHandler, Eligible, ExecutionStatus, Handler
from dbworker.limits import Limit
from dbworker.retries import Retry
from dbworker.schedules import ticks
from dbworker.schedules.policy import Schedule
from dbworker.sql import (
    dialects,
    history,
    items,
    names,
    pauses,
    progress,
    slots,
    status,
    sweeps,
    tables,
    traces,
    upgrade,
    waiting,
)
from dbworker.sql.due import Due

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class RegisteredWorker:
    """One ``@transactional_worker`` registration, as the coordinator keeps it."""

    name: str
    source: Any
    handler: Handler | AsyncHandler
    eligible: Eligible | None
    concurrency: int
    table: sa.Table
    key: sa.Column[Any]
    retry: Retry | None = None
    timeout: float | None = None  # seconds a handler may run before it is ended
    due: Due | None = None  # transactional_worker(due=...): ``eligible`` is this, narrowed to due rows
    schedule: Schedule | None = None  # coordinator.periodic(...): the source is the ticks table
    processes: int | None = None  # transactional_worker(processes=...); None: the default (process_count)
    limits: tuple[Limit, ...] = ()  # transactional_worker(limits=...): docs/limits.md

    @property
    def asynchronous(self) -> bool:
        """The handler is ``async def``: its items run as coroutines, many per process."""
        return is_async(self.handler)

    @property
    def process_count(self) -> int:
        """Handler processes that carry the worker's items: ``processes``, else one for an
        async handler and ``concurrency`` for a sync one (a process per item)."""
        if self.processes is not None:
            return self.processes
        return 1 if self.asynchronous else self.concurrency


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"worker name {name!r} is invalid: use lower-case letters, digits and _, starting with a letter ([a-z][a-z0-9_]*)")
    names.check_worker_name_length(name)
    return name


def check_handler(name: str, handler: object) -> None:
    """``ValueError`` for a handler that cannot reach handler processes: not callable, or not
    picklable (a lambda, a function defined inside another, a method of an unpicklable object).

    Checked at registration, so the error comes where the handler is written, not at start().
    """
    if not callable(handler):
        raise ValueError(f"worker {name!r}: the handler must be a function, got {handler!r}")
    what = getattr(handler, "__qualname__", type(handler).__name__)
    fix = "define handlers as module-level functions (not lambdas, nor functions defined inside another)"
    if inspect.isfunction(handler):
        # A function pickles by its module and name, which a decorator runs before they are
        # bound (``@transactional_worker`` over ``def handle``): tell by the name alone.
        if "<lambda>" in what or "<locals>" in what:
            raise ValueError(f"worker {name!r}: its handler {what} cannot be pickled to handler processes; {fix}")
        return
    try:
        pickle.dumps(handler)  # another callable (a partial, a bound method): as start() will
    except Exception as exc:  # noqa: BLE001 - whatever pickle raises, the handler cannot go
        raise ValueError(
            f"worker {name!r}: its handler {what} cannot be pickled to handler processes "
            f"({type(exc).__name__}); {fix}"
        ) from None


def check_retry(retry: object) -> Retry | None:
    if retry is not None and not isinstance(retry, Retry):
        raise ValueError(f"retry must be a dbworker.Retry(max_attempts=...) or None, got {retry!r}")
    return retry


def check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be None or a positive number of seconds, got {timeout!r}")
    bounds.check(timeout, bounds.WAIT, field="timeout")
    return float(timeout)


def describe_handler(handler: object) -> str:
    """``module.qualname`` of a handler, as warnings name it."""
    name = getattr(handler, "__qualname__", type(handler).__name__)
    return f"{getattr(handler, '__module__', '?')}.{name}"


def is_async(handler: object) -> bool:
    """Whether ``handler`` is an ``async def`` function (or a partial of one)."""
    return inspect.iscoroutinefunction(handler)


def check_processes(processes: object, *, concurrency: int, handler: object, name: str) -> int | None:
    """``processes`` of worker ``name`` as given (None: the default), or ``ValueError``: it
    must be an integer from 1 to ``concurrency``, and equal to it for a sync handler."""
    if processes is None:
        return None
    field = f"processes of worker {name!r}"
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"{field} must be an integer >= 1, got {processes!r}")
    if not is_async(handler) and processes != concurrency:
        raise ValueError(
            f"{field} must equal its concurrency ({concurrency}) for a sync handler, got {processes}: "
            "a sync handler runs each item in a process of its own; leave processes out, or make "
            "the handler `async def` to run many items per process"
        )
    if processes > concurrency:
        raise ValueError(
            f"{field} must be at most its concurrency ({concurrency}), got {processes}: each process "
            "carries at least one item; raise concurrency or lower processes"
        )
    return processes


def with_concurrency(worker: RegisteredWorker, concurrency: object) -> RegisteredWorker:
    """``worker`` with ``concurrency`` (checked); a sync worker's processes follow it."""
    n = check_concurrency(concurrency, field=f"concurrency of {worker.name}")
    processes = worker.processes if worker.asynchronous else None
    check_processes(processes, concurrency=n, handler=worker.handler, name=worker.name)
    return dataclasses.replace(worker, concurrency=n, processes=processes)


def with_processes(worker: RegisteredWorker, processes: object) -> RegisteredWorker:
    """``worker`` with ``processes`` (checked as at registration)."""
    checked = check_processes(processes, concurrency=worker.concurrency, handler=worker.handler, name=worker.name)
    return dataclasses.replace(worker, processes=checked)


def check_concurrency(concurrency: object, *, field: str = "concurrency") -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"{field} must be an integer >= 1, got {concurrency!r}")
    bounds.check(concurrency, bounds.CONCURRENCY, field=field)
    return concurrency


def beside(table: sa.Table, source: sa.Table, limits: tuple[Limit, ...]) -> None:
    """Define the tables kept beside a work table: its attempt history, its source's trace
    contexts (dbworker.otel), and with limits its slots."""
    history.history_table(table)
    traces.side_table(source)
    if limits:
        slots.slots_table(table)


def own_tables(registered: Iterable[RegisteredWorker]) -> list[sa.Table]:
    """Every table dbworker keeps for ``registered`` workers: theirs (work, history, slots), their
    sources' trace contexts, ``dbworker_ticks`` when one is periodic, the pause and sweep tables."""
    found = list(registered)
    scheduled = [ticks.TABLE] if any(w.schedule for w in found) else []
    work = [w.table for w in found]
    limited = [slots.slots_table(w.table) for w in found if w.limits]
    traced = {id(t): traces.side_table(t) for t in sources(found)}.values()
    return [*scheduled, *work, *map(history.history_table, work), *limited, pauses.TABLE, sweeps.TABLE,
            *traced]


def sources(registered: Iterable[RegisteredWorker]) -> list[sa.Table]:
    """The source tables of ``registered`` workers."""
    return [w.key.table for w in registered]


class WriteLockHeld(RuntimeError):
    """SQLite: a write (``cancel``) waited out the busy timeout for the database's only write
    lock, which a running handler that has written holds until its commit."""


class WorkerView:
    """``coordinator.workers[name]``: the registration's facts and queries on its records."""

    def __init__(self, registry: Mapping[str, RegisteredWorker], name: str) -> None:
        self._registry = registry
        self.name = name

    @property
    def _w(self) -> RegisteredWorker:
        return self._registry[self.name]

    @property
    def concurrency(self) -> int:
        return self._w.concurrency

    @property
    def processes(self) -> int:
        """Handler processes carrying its items (docs/async.md)."""
        return self._w.process_count

    @property
    def asynchronous(self) -> bool:
        """Its handler is ``async def``: items run as coroutines, many per process."""
        return self._w.asynchronous

    @property
    def source(self) -> Any:
        return self._w.source

    @property
    def table(self) -> sa.Table:
        return self._w.table

    def state(self, session: Session, source_id: Any) -> dict[str, Any] | None:
        """The item's record: ``execution_status``, ``error``, ``lease_expires_at`` (and more),
        ``progress`` (the latest report or None) and ``history`` (the kept attempts, oldest
        first; docs/history.md), or None."""
        return status.read_state(session, self._w.table, source_id)

    def progress(self, engine: sa.Engine) -> tuple[int, float | None]:
        """Items WORKING now that reported a fraction done, and their mean fraction (None if none)."""
        with Session(engine) as session:
            return progress.summary(session, self._w.table)

    @property
    def limited(self) -> bool:
        """It was registered with ``limits=`` (docs/limits.md)."""
        return bool(self._w.limits)

    def waiting_on_limit(self, engine: sa.Engine, *, cap: int, top: int = waiting.TOP_KEYS) -> waiting.Waiting | None:
        """Of its first ``cap`` claimable items, those no pod can start now because of a limit,
        and the ``top`` keys most behind; None for a worker without limits."""
        w = self._w
        if not w.limits:
            return None
        with dialects.connect(engine) as conn:
            return waiting.on_limit(conn, table=w.table, key=w.key, eligible=w.eligible, limits=w.limits, cap=cap,
                                    top=top)  # fmt: skip

    def reset_failed(self, session: Session, source_id: Any) -> bool:
        """Set a FAILED item back to UNFINISHED with error and claim cleared; True if it was FAILED."""
        return self._reset(session, self._w.table.c.source_id == source_id) == 1

    def cancel(self, session: Session, source_id: Any) -> bool:
        """Cancel an item that is not FINISHED or FAILED (a never-claimed one included): it
        becomes FAILED with the error ``cancelled``, and a running handler is ended by its pod
        at its next lease renewal, its writes rolled back. True if it cancelled something; the
        caller commits. ``reset_failed`` brings a cancelled item back.
        """
        try:
            return items.cancel(session.connection(), self._w.table, source_id)
        except sa.exc.OperationalError as exc:
            if session.get_bind().dialect.name != "sqlite" or "locked" not in str(exc.orig):
                raise
            raise WriteLockHeld(
                f"cannot cancel item {source_id!r} of worker {self.name!r} now: SQLite's only write lock "
                "is held by another writer, most likely a running handler that has written (flushed) and "
                "not yet returned (it holds the lock until dbworker commits its outcome). Roll back this "
                "session and cancel again once that handler returns; on SQLite, handlers that may need "
                "cancelling should do their slow work before their first write (docs/lifecycle.md, "
                "SQLite's single writer)"
            ) from exc

    def reset_all_failed(self, session: Session) -> int:
        """Reset every FAILED item as ``reset_failed`` does; return how many."""
        return self._reset(session, sa.true())

    def _reset(self, session: Session, which: sa.ColumnElement[bool]) -> int:
        return items.reset(session, self._w.table, which, source_table=self._w.key.table.name)

    def counts(self, session: Session) -> dict[ExecutionStatus, int]:
        """How many items are in each status."""
        return status.counts(session, self._w.table)

    def failed(self, session: Session, *, limit: int = 100) -> list[tuple[Any, str | None]]:
        """Up to ``limit`` failed items as (source_id, error)."""
        return status.failed(session, self._w.table, limit=limit)

    def pause(self, session: Session, *, by: str | None = None) -> bool:
        """Stop claiming for this worker in every coordinator (each sees it within a second,
        running handlers finish); True if it was not paused. ``by`` is recorded as who did
        it. The caller commits.
        """
        return pauses.pause(session.connection(), self.name, by=by)

    def resume(self, session: Session) -> bool:
        """Undo ``pause``; True if it was paused. The caller commits."""
        return pauses.resume(session.connection(), self.name)

    def paused(self, session: Session) -> bool:
        """Whether this worker is paused fleet-wide."""
        return pauses.is_paused(session.connection(), self.name)

    def missing_due_index(self, session: Session) -> str | None:
        """With a ``due`` column that no index starts with: the ``CREATE INDEX`` to run (the
        due-time lookup reads that index every second); else None.
        """
        due = self._w.due
        if due is None or due.column.name in upgrade.leading_columns(session.connection(), due.column.table):
            return None
        table = due.column.table.name
        return f"CREATE INDEX ix_{table}_{due.column.name} ON {table} ({due.column.name})"

    def schedule(self, session: Session) -> dict[str, Any] | None:
        """A periodic worker's schedule: ``schedule`` (as written), ``next_due_at`` (naive UTC,
        on the database's clock) and ``last`` (the latest tick that ended: ``tick``, ``due_at``,
        ``execution_status``, ``error``; None before the first); None for other workers.
        """
        timing = self._w.schedule
        if timing is None:
            return None
        conn = session.connection()
        return {
            "schedule": timing.policy.describe(),
            "next_due_at": timing.policy.following(ticks.server_now(conn)),
            "last": ticks.last_result(conn, self.name, self._w.table),
        }

    def __repr__(self) -> str:
        return f"<worker {self.name!r} over {self._w.source.__name__}, concurrency {self.concurrency}>"


class WorkerViews(Mapping[str, WorkerView]):
    """Read-only mapping of worker name to view; unknown names raise ``KeyError``."""

    def __init__(self, registry: Mapping[str, RegisteredWorker]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> WorkerView:
        if name not in self._registry:
            known = ", ".join(sorted(self._registry)) or "none"
            raise KeyError(f"unknown worker {name!r} (registered: {known})")
        return WorkerView(self._registry, name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._registry))

    def __len__(self) -> int:
        return len(self._registry)


__all__ = [
    "RegisteredWorker",
    "WorkerView",
    "WorkerViews",
    "beside",
    "check_concurrency",
    "check_handler",
    "check_name",
    "check_processes",
    "describe_handler",
    "is_async",
    "own_tables",
    "sources",
    "tables",
    "with_concurrency",
    "with_processes",
]
