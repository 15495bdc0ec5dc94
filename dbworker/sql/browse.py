"""Reads for browsing one worker's records: a page of items, who runs what, recent failures.

Each read goes through an index (the primary key, the ``execution_status`` index), so a
page costs the same with a million finished items as with none; none counts the history.
Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, times

_WORKING = ExecutionStatus.WORKING.value
_FAILED = ExecutionStatus.FAILED.value


@dataclass(frozen=True)
class Page:
    """Up to ``limit`` records, highest key first; ``more``: there are records past the last."""

    rows: list[dict[str, Any]]
    more: bool

    @property
    def last_key(self) -> Any:
        return self.rows[-1]["source_id"] if self.rows else None


@dataclass(frozen=True)
class Claimer:
    """The running items one process (``host:pid``) holds, and how many of their leases expired."""

    claimed_by: str | None
    running: int
    expired: int


def page(
    conn: Connection,
    table: sa.Table,
    *,
    statuses: Iterable[str] = (),
    before: Any = None,
    source_id: Any = None,
    limit: int = 50,
    conditions: Sequence[sa.ColumnElement[bool]] = (),
    source: sa.Table | None = None,
) -> Page:
    """Records in ``statuses`` (all: empty) meeting ``conditions`` (over the work table and,
    when given, the ``source`` table joined on its key), highest key first, below ``before``
    (the last key of the page before); ``source_id`` looks up that one record. Keyset paging
    on the primary key: no offset, no count.
    """
    query = page_query(table, statuses=statuses, before=before, source_id=source_id, limit=limit,
                       conditions=conditions, source=source)  # fmt: skip
    # Times past what Python holds (stored by an earlier release, or by hand) read as times.LATEST.
    query = query.with_only_columns(*times.readable_columns(table, conn.dialect))
    rows = [dict(r) for r in conn.execute(query).mappings()]
    return Page(rows[:limit], len(rows) > limit)


def page_query(
    table: sa.Table, *, statuses: Iterable[str] = (), before: Any = None, source_id: Any = None, limit: int = 50,
    conditions: Sequence[sa.ColumnElement[bool]] = (), source: sa.Table | None = None,
) -> sa.Select[Any]:
    """``page``'s statement: one row more than ``limit`` tells whether more follow."""
    w = table.c
    query = sa.select(table)
    if source is not None:
        key = next(iter(w.source_id.foreign_keys)).column
        query = query.join(source, key == w.source_id)
    if conditions:
        query = query.where(*conditions)
    wanted = list(statuses)
    if wanted:
        query = query.where(w.execution_status.in_(wanted))
    if source_id is not None:
        query = query.where(w.source_id == source_id)
    if before is not None:
        query = query.where(w.source_id < before)
    return query.order_by(w.source_id.desc()).limit(limit + 1)


def claimers(conn: Connection, table: sa.Table) -> list[Claimer]:
    """WORKING items by the process that claimed them (through the status index), most first."""
    w = table.c
    now = dialects.of(conn).now()
    expired = sa.func.sum(sa.case((sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= now), 1), else_=0))
    rows = conn.execute(
        sa.select(w.claimed_by, sa.func.count(), expired)
        .where(w.execution_status == _WORKING)
        .group_by(w.claimed_by)
    ).all()
    found = [Claimer(r[0], int(r[1]), int(r[2] or 0)) for r in rows]
    return sorted(found, key=lambda c: (-c.running, c.claimed_by or ""))


def failed_since(conn: Connection, table: sa.Table, seconds: float) -> int:
    """How many items failed (finally) in the last ``seconds``, on the server's clock."""
    w = table.c
    since = dialects.of(conn).now_plus(-seconds)
    return int(
        conn.execute(
            sa.select(sa.func.count()).where(w.execution_status == _FAILED, w.ended_at >= since)
        ).scalar_one()
    )


def server_now(conn: Connection) -> datetime:
    """The database server's time (naive UTC), as leases are compared with it."""
    value = conn.execute(sa.select(dialects.of(conn).now())).scalar_one()
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
