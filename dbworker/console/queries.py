"""What the console's pages and API show, read through the Coordinator and its worker views.

Plain data out (dicts and dataclasses), JSON-ready; the SQL is the library's own
(``dbworker.sql.status``, ``browse``, ``pauses``). Values from the application's source
rows are shortened and masked before they leave (see ``shown``).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

import dbworker
from dbworker import redact
from dbworker.console import filters, timeline, tracelinks
from dbworker.sql import browse, claimer, keys, pauses, tables
from dbworker.wakeups import dependencies

PAGE_SIZE = 50
BACKLOG_CAP = 1000
# The claimable count walks the eligible query (up to the cap) past the finished history: an
# overview refreshed every few seconds in several browsers reuses it this long per worker.
BACKLOG_SECONDS = 15.0
RECENT_SECONDS = 3600.0
LONG_TEXT = 300  # characters of a source column shown before it is cut
FILTERS = ("failed", "working", "unfinished", "finished")
# Source columns whose values are never shown, whatever they hold.
_SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|api_?key|credential", re.I)


@dataclass(frozen=True)
class Running:
    pod: str | None
    pid: int | None
    running: int
    expired: int


@dataclass(frozen=True)
class WorkerSummary:
    """One row of the overview."""

    name: str
    source: str
    table: str
    concurrency: int
    counts: dict[str, int]
    claimable: int
    claimable_capped: bool
    failed_last_hour: int
    paused: bool
    paused_by: str | None
    waits_for: list[str]
    running: list[Running] = field(default_factory=list)
    # A periodic worker's schedule, next due time and last result (``WorkerView.schedule``).
    schedule: dict[str, Any] | None = None
    processes: int = 1  # handler processes per pod carrying its items
    asynchronous: bool = False  # an ``async def`` handler: items run as coroutines (docs/async.md)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def overview(coordinator: dbworker.Coordinator) -> list[WorkerSummary]:
    """Every registered worker: counts by status (from the status index), claimable now
    (capped), running items by pod and process, failures in the last hour, pause, dependencies.
    """
    deps = dependencies.dependency_map(coordinator.registrations())
    with coordinator.engine.connect() as conn:
        paused = pauses.read(conn)
    result = []
    for reg in coordinator.registrations():
        view = coordinator.workers[reg.name]
        with orm.Session(coordinator.engine) as session:
            counts = view.counts(session)
            conn = session.connection()
            running = [_running(c) for c in browse.claimers(conn, reg.table)]
            recent = browse.failed_since(conn, reg.table, RECENT_SECONDS)
            schedule = view.schedule(session)
        claimable = _backlog(coordinator, reg.name)
        waits = deps.get(reg.name, frozenset())
        pause = paused.get(reg.name)
        result.append(
            WorkerSummary(
                name=reg.name,
                source=reg.source.__name__,
                table=reg.table.name,
                concurrency=reg.concurrency,
                processes=reg.process_count,
                asynchronous=reg.asynchronous,
                counts={s.value: int(n) for s, n in counts.items()},
                claimable=claimable,
                claimable_capped=claimable >= BACKLOG_CAP,
                failed_last_hour=recent,
                paused=pause is not None,
                paused_by=None if pause is None else pause.paused_by,
                waits_for=["any worker (its query could not be read)"] if waits is dependencies.ANY else sorted(waits),
                running=running,
                schedule=schedule,
            )
        )
    return result


_backlogs: weakref.WeakKeyDictionary[dbworker.Coordinator, dict[str, tuple[float, int]]] = weakref.WeakKeyDictionary()
_backlogs_lock = threading.Lock()


def _backlog(coordinator: dbworker.Coordinator, worker: str) -> int:
    """``coordinator.backlog`` (capped), read at most every ``BACKLOG_SECONDS`` per worker."""
    now = time.monotonic()
    with _backlogs_lock:
        cached = _backlogs.get(coordinator, {}).get(worker)
    if cached is not None and now - cached[0] < BACKLOG_SECONDS:
        return cached[1]
    value = coordinator.backlog(worker, cap=BACKLOG_CAP)
    with _backlogs_lock:
        _backlogs.setdefault(coordinator, {})[worker] = (now, value)
    return value


def waiting_on_limit(coordinator: dbworker.Coordinator, worker: str) -> dict[str, Any] | None:
    """A worker with limits: how many of its claimable items no pod can start now because of
    a limit (``capped`` at ``BACKLOG_CAP``), and the keys most behind, each ``shown`` as a
    source value of the key's column is (keys are application data); None without limits."""
    found = coordinator.workers[worker].waiting_on_limit(coordinator.engine, cap=BACKLOG_CAP)
    if found is None:
        return None
    keys = [
        {"key": shown(found.key_name, k.key, coordinator.secrets), "waiting": k.waiting, "held": k.held}
        for k in found.keys
    ]
    return {"count": found.count, "capped": found.capped, "keys": keys}


def _running(c: browse.Claimer) -> Running:
    pod, pid = claimer.split(c.claimed_by)
    return Running(pod=pod, pid=pid, running=c.running, expired=c.expired)


def item_row(row: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """A work record as the console shows it: status, attempts, error, lease, who holds it."""
    pod, pid = claimer.split(row.get("claimed_by"))
    status = str(row["execution_status"])
    lease = row.get("lease_expires_at")
    lease_at = _as_datetime(lease)
    return {
        "id": row["source_id"],
        "status": status,
        "attempts": int(row.get("attempts") or 0),
        "error": row.get("error"),
        "lease_expires_at": _iso(lease_at),
        "lease_expired": status == "working" and (lease_at is None or lease_at <= now),
        "not_before": _iso(_as_datetime(row.get("not_before"))),
        "ended_at": _iso(_as_datetime(row.get("ended_at"))),
        # Who made the latest claim: for a running item, the pod and process that hold it.
        "pod": pod,
        "pid": pid,
    }


def items(
    coordinator: dbworker.Coordinator,
    worker: str,
    *,
    status: str | None,
    before: Any = None,
    source_id: Any = None,
    limit: int = PAGE_SIZE,
    where: filters.ItemFilter | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """One page of ``worker``'s items meeting ``status`` and ``where``, newest (highest key)
    first, and the key the next page starts below (None: the last page).
    """
    view = coordinator.workers[worker]
    table = view.table
    source = tables.source_key(view.source).table
    chosen = where or filters.ItemFilter()
    with coordinator.engine.connect() as conn:
        found = browse.page(
            conn, table, statuses=[status] if status else [], before=before, source_id=source_id, limit=limit,
            conditions=chosen.conditions(table, source), source=source if chosen.needs_source else None,
        )  # fmt: skip
        now = browse.server_now(conn)
    return [item_row(r, now) for r in found.rows], (found.last_key if found.more else None)


def item(coordinator: dbworker.Coordinator, worker: str, source_id: Any, *,
         trace_url: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    """One item: its work state (traceback included), the source row's columns; None if neither
    exists. ``trace_url``: the trace UI's template, linking each traced attempt (``tracelinks``)."""
    view = coordinator.workers[worker]
    with orm.Session(coordinator.engine) as session:
        state = view.state(session, source_id)
        source = session.get(view.source, source_id)
        columns = source_columns(source, coordinator.secrets) if source is not None else None
        now = browse.server_now(session.connection())
    if state is None and source is None:
        return None
    record = None
    if state is not None:
        raw = dict(state)
        raw["execution_status"] = raw["execution_status"].value
        attempts = state.get("history") or []
        spans = [(_as_datetime(a["started_at"]), _as_datetime(a["ended_at"]) or now) for a in attempts]
        history = [_attempt(a, trace_url) | {"bar": bar} for a, bar in zip(attempts, timeline.bars(spans), strict=True)]
        span = timeline.axis(spans)
        record = item_row(raw, now) | {
            "traceback": state.get("traceback"), "progress": _progress(state.get("progress")), "history": history,
            "timeline": None if span is None else {"from": _iso(span[0]), "to": _iso(span[1]), "width": timeline.WIDTH},
        }  # fmt: skip
    return {"id": source_id, "worker": worker, "state": record, "source": columns}


def source_columns(obj: Any, secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    """The source row's mapped columns as the model declares them, each value ``shown``."""
    mapper = sa.inspect(type(obj))
    result = []
    for attr in mapper.column_attrs:
        result.append((attr.key, shown(attr.key, getattr(obj, attr.key), secrets)))
    return result


def shown(name: str, value: Any, secrets: tuple[str, ...] = ()) -> str:
    """A value as a page may show it: binary as its size, long text cut, secrets masked."""
    if _SECRET_NAME.search(name) and value is not None:
        return "*** (hidden: the column's name says it is a secret)"
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{memoryview(value).nbytes} bytes>"
    text = str(value)
    if len(text) <= LONG_TEXT:
        return redact.redact(text, secrets)
    # Cut first: only what is shown is masked (a password the cut ends inside too).
    kept = redact.redact(text, secrets, limit=LONG_TEXT + len(redact.CUT)).removesuffix(redact.CUT)
    return f"{kept}… ({len(text)} characters)"


def convert_id(coordinator: dbworker.Coordinator, worker: str, raw: str) -> Any:
    """``raw`` (from a URL or a form, taken as it is) as a key of ``worker``'s source;
    ``ValueError`` naming the type, ``keys.OutOfRange`` when no item can have it."""
    return keys.parse(raw, coordinator.workers[worker].source, coordinator.engine.dialect)


def counts(coordinator: dbworker.Coordinator, worker: str) -> dict[str, int]:
    """``worker``'s items per status (from the status index)."""
    with orm.Session(coordinator.engine) as session:
        return {s.value: int(n) for s, n in coordinator.workers[worker].counts(session).items()}


def paused(coordinator: dbworker.Coordinator, worker: str) -> bool:
    with orm.Session(coordinator.engine) as session:
        return coordinator.workers[worker].paused(session)


def _progress(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The latest progress report as pages and the API show it (``at`` as ISO text)."""
    if report is None:
        return None
    return {"fraction": report["fraction"], "note": report["note"], "at": _iso(_as_datetime(report["at"]))}


def _attempt(attempt: dict[str, Any], trace_url: str | None) -> dict[str, Any]:
    """One attempt of the history as pages and the API show it: times as ISO text, pod and
    pid, its trace's ids and (with a template) address."""
    pod, pid = claimer.split(attempt.get("claimed_by"))
    return {
        "started_at": _iso(_as_datetime(attempt["started_at"])),
        "ended_at": _iso(_as_datetime(attempt["ended_at"])),
        "outcome": attempt["outcome"],
        "error": attempt["error"],
        "traceback": attempt["traceback"],
        "claimed_by": attempt["claimed_by"],
        "pod": pod,
        "pid": pid,
        "logs": list(attempt.get("logs") or []),
        "trace_id": attempt.get("trace_id"),
        "span_id": attempt.get("span_id"),
        "trace_url": tracelinks.link(trace_url, attempt.get("trace_id"), attempt.get("span_id")),
    }


def _as_datetime(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.replace(microsecond=0).isoformat(sep=" ") + " UTC"


__all__ = ["FILTERS", "item", "items", "overview"]
