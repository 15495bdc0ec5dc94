"""The attempt history of a worker: ``<name>_history``, one row per ended attempt.

Each attempt that ran a handler (finished, unfinished, failed, retried, crashed, timed out)
gets one row, inserted in the same transaction as the outcome it records (``record``), so
the history is exactly the outcomes that committed. Rows are bounded twice, by the fleet in
small batches (``prune``): an age (through the ``ended_at`` index) and a count per item
(through the ``(source_id, id)`` index, only for items with attempts since the last pass).
Deleting a source row deletes its history (``ON DELETE CASCADE``; on SQLite a delete trigger
too, ``tables.cascade_trigger_ddl``, since its foreign keys act only where a connection
turned them on).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from dbworker import attemptlogs
from dbworker.sql import dialects, names, tables
from dbworker.sql.states import clip
from dbworker.sql.tables import CLAIMER_LENGTH, MICROSECONDS, STATUS_LENGTH

OUTCOME_LENGTH = STATUS_LENGTH
TRACE_ID_LENGTH = 32  # W3C trace id, hex
SPAN_ID_LENGTH = 16
# SQLite autoincrements only an INTEGER PRIMARY KEY.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


@dataclass(frozen=True)
class Attempt:
    """What the process recording an attempt's outcome knows of it besides the outcome."""

    table: sa.Table | None  # the worker's history table; None: no history kept (history_attempts=0)
    started_at: dt.datetime | None  # naive UTC
    claimed_by: str | None  # host:pid of the pod process that claimed it
    # The attempt's log records so far, as the ``logs`` column keeps them (``attemptlogs``);
    # None: not kept (the setting is off, or the attempt's process is gone).
    logs: Callable[[], str | None] | None = None
    # (trace id, span id) in hex of the attempt's ``process <worker>`` span when tracing
    # records it (``tracing.recording_ids``); None otherwise.
    trace: tuple[str, str] | None = None

    def record(self, conn: Connection, source_id: Any, outcome: str, *, error: str | None = None,
               traceback: str | None = None) -> None:  # fmt: skip
        """``record`` this attempt with its ``outcome`` and the records logged until now; no commit."""
        if self.table is None:
            return
        record(conn, self.table, source_id, outcome=outcome, started_at=self.started_at,
               claimed_by=self.claimed_by, error=error, traceback=traceback,
               logs=None if self.logs is None else self.logs(), trace=self.trace)  # fmt: skip

    def values(self, outcome: str) -> dict[str, Any]:
        """The bound values of ``recorded``'s history row for this attempt ending ``outcome``."""
        claimer = self.claimed_by
        return {"dbw_started": self.started_at, "dbw_outcome": outcome,
                "dbw_claimer": None if claimer is None else claimer[:CLAIMER_LENGTH],
                "dbw_logs": _kept(None if self.logs is None else self.logs()),
                "dbw_trace_id": None if self.trace is None else self.trace[0],
                "dbw_span_id": None if self.trace is None else self.trace[1]}  # fmt: skip


def table_name(worker: str) -> str:
    return f"{worker}_history"


def history_table(work: sa.Table) -> sa.Table:
    """The history table beside the work table ``work`` (same MetaData), defined once."""
    worker = work.name.removesuffix("_work")
    name = table_name(worker)
    existing = work.metadata.tables.get(name)
    if existing is not None:
        return existing
    key = next(iter(work.c.source_id.foreign_keys)).column
    table = sa.Table(
        name,
        work.metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("source_id", key.type, sa.ForeignKey(key, ondelete="CASCADE"), nullable=False),
        # The handler process's clock (naive UTC) when the attempt started; None if unknown.
        sa.Column("started_at", MICROSECONDS, nullable=True),
        # The database server's clock (naive UTC), as the work table's ended_at.
        sa.Column("ended_at", MICROSECONDS, nullable=False),
        sa.Column("outcome", sa.String(OUTCOME_LENGTH), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.String(CLAIMER_LENGTH), nullable=True),
        # The handler's log records during the attempt, JSON (``attemptlogs``); added by a later
        # release than the table (``tables.ADDED_COLUMNS``).
        sa.Column("logs", sa.Text(), nullable=True),
        # The trace and span ids (hex) of the attempt's ``process <worker>`` span when tracing
        # recorded it (docs/otel.md); added later too.
        sa.Column("trace_id", sa.String(TRACE_ID_LENGTH), nullable=True),
        sa.Column("span_id", sa.String(SPAN_ID_LENGTH), nullable=True),
        sa.Index(names.identifier(f"ix_{name}_source_id"), "source_id", "id"),
        sa.Index(names.identifier(f"ix_{name}_ended_at"), "ended_at"),
        info={"dbworker_history_of": work.name},
    )
    tables.cascade_on_sqlite(table)  # SQLite: an AFTER DELETE trigger on the source too
    return table


def utcnow() -> dt.datetime:
    """This process's clock as the history stores it (naive UTC)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def record(conn: Connection, table: sa.Table, source_id: Any, *, outcome: str, started_at: dt.datetime | None,
           claimed_by: str | None, error: str | None = None, traceback: str | None = None,
           logs: str | None = None, trace: tuple[str, str] | None = None) -> None:  # fmt: skip
    """Insert one ended attempt (``logs``: ``attemptlogs.encode``'s JSON); no commit (the
    caller's transaction also writes its outcome)."""
    conn.execute(_insert(table), {
        "source_id": source_id,
        "started_at": started_at,
        "outcome": outcome,
        "error": clip(error),
        "traceback": clip(traceback),
        "claimed_by": None if claimed_by is None else claimed_by[:CLAIMER_LENGTH],
        "logs": _kept(logs),
        "trace_id": None if trace is None else trace[0],
        "span_id": None if trace is None else trace[1],
    })  # fmt: skip


def _kept(logs: str | None) -> str | None:
    """The attempt's logs as stored: none past ``attemptlogs.TOTAL_CHARS``."""
    return logs if logs is None or len(logs) <= attemptlogs.TOTAL_CHARS else None


def recorded(update: sa.Update, table: sa.Table) -> sa.Insert:
    """The fenced write ``update`` of one work row and its attempt's row in ``table`` as one
    statement (a data-modifying CTE: PostgreSQL), saving a round trip per item.

    The UPDATE's RETURNING feeds the INSERT, so the attempt is recorded, and a row returned,
    exactly when the fence matched. Parameters: the update's, then ``Attempt.values``'.
    Locks: the update's, and the history row it inserts.
    """
    h = table.c
    done = update.returning(update.table.c.source_id).cte("dbw_done")
    # The CTE's key named, not read from ``done.c``: SQLAlchemy leaves that collection empty
    # when the same prebuilt UPDATE fed a CTE before (a second engine in one process).
    sid = sa.literal_column("dbw_done.source_id", type_=h.source_id.type)
    rows = sa.select(
        sid,
        sa.bindparam("dbw_started", type_=h.started_at.type),
        dialects.server_now(),
        sa.bindparam("dbw_outcome", type_=h.outcome.type),
        sa.bindparam("dbw_claimer", type_=h.claimed_by.type),
        sa.bindparam("dbw_logs", type_=h.logs.type),
        sa.bindparam("dbw_trace_id", type_=h.trace_id.type),
        sa.bindparam("dbw_span_id", type_=h.span_id.type),
    ).select_from(done)
    columns = ["source_id", "started_at", "ended_at", "outcome", "claimed_by", "logs", "trace_id", "span_id"]
    # RETURNING, not the row count: SQLAlchemy keeps an INSERT's row count only when asked.
    return sa.insert(table).from_select(columns, rows).add_cte(done).returning(h.source_id)


@functools.cache
def _insert(table: sa.Table) -> sa.Insert:
    # One statement object per table, so SQLAlchemy's compiled cache serves it.
    return sa.insert(table).values(ended_at=dialects.server_now())


def read(session: Session, table: sa.Table, source_id: Any, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The kept attempts of ``source_id``, oldest first (at most the newest ``limit``), each
    with ``logs``, its log records (a list of mappings: ``at``, ``level``, ``logger``, ``message``),
    and ``trace_id`` / ``span_id`` of its ``process`` span (None when not traced)."""
    h = table.c
    newest = (
        sa.select(h.started_at, h.ended_at, h.outcome, h.error, h.traceback, h.claimed_by, h.logs,
                  h.trace_id, h.span_id, h.id)
        .where(h.source_id == source_id)
        .order_by(h.id.desc())
        .limit(limit)
    )
    rows = [dict(row) for row in session.execute(newest).mappings()]
    rows.reverse()
    for row in rows:
        del row["id"]
        row["logs"] = attemptlogs.decode(row["logs"])
    return rows


def prune(conn: Connection, table: sa.Table, *, keep: int, days: float, since: dt.datetime | None,
          batch: int) -> int:  # fmt: skip
    """One pass, committed, each step at most ``batch`` rows: delete attempts that ended more
    than ``days`` ago (the ``ended_at`` index), then keep the newest ``keep`` of each item
    with an attempt ended after ``since`` (the server clock; None: skip). How many went.

    Keys are read first and deleted by key: MariaDB refuses a LIMIT in a subquery of IN.
    """
    h = table.c
    caps = dialects.of(conn)
    old = conn.execute(
        sa.select(h.id).where(h.ended_at < caps.now_plus(-days * 86400.0)).order_by(h.ended_at).limit(batch)
    ).scalars().all()
    deleted = _delete(conn, table, old)
    conn.commit()
    if since is None:
        return deleted
    recent = conn.execute(
        sa.select(h.source_id).where(h.ended_at >= since).group_by(h.source_id).limit(batch)
    ).scalars().all()
    if recent:  # only the items over ``keep``: one grouped read, not one read per item
        recent = conn.execute(
            sa.select(h.source_id).where(h.source_id.in_(list(recent))).group_by(h.source_id)
            .having(sa.func.count() > keep)
        ).scalars().all()  # fmt: skip
    budget = batch
    for source_id in recent:
        cut = conn.execute(
            sa.select(h.id).where(h.source_id == source_id).order_by(h.id.desc()).offset(keep).limit(1)
        ).scalar()
        if cut is None:
            continue
        extra = conn.execute(
            sa.select(h.id).where(h.source_id == source_id, h.id <= cut).limit(budget)
        ).scalars().all()
        deleted += _delete(conn, table, extra)
        budget -= len(extra)
        if budget <= 0:
            break
    conn.commit()
    return deleted


def _delete(conn: Connection, table: sa.Table, ids: Any) -> int:
    if not ids:
        return 0
    return int(conn.execute(sa.delete(table).where(table.c.id.in_(list(ids)))).rowcount)


def server_now(conn: Connection) -> dt.datetime:
    """The server's clock, naive UTC, as ``ended_at`` stores it."""
    now: dt.datetime = conn.execute(sa.select(dialects.of(conn).now())).scalar_one()
    return now
