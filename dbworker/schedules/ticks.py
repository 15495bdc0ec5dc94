"""The ticks table: dbworker's own rows of ``(schedule name, due time)``, the source of
every periodic worker, and the statements the inserter, retention and ``inspect`` run.

A unique index on both columns lets every coordinator insert each due time and only one
insert win: no leader is needed. Each periodic worker's ``<name>_work`` table refers to
these rows like any work table to its source. Nothing here commits unless it says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import tuning
from dbworker.sql import dialects, items, tables
from dbworker.sql.states import DONE as _ENDED
from dbworker.sql.transactions import committed

TABLE_NAME = "dbworker_ticks"
NAME_LENGTH = 64


class _Base(DeclarativeBase):
    metadata = sa.MetaData()  # dbworker's own, apart from the application's


class Tick(_Base):
    """One due time of one schedule: what a periodic handler receives (``tick.name``,
    ``tick.due_at`` in naive UTC); ``tick.id`` is its ``source_id`` in status calls.
    """

    __tablename__ = TABLE_NAME
    __table_args__ = (sa.Index(f"ux_{TABLE_NAME}_name_due_at", "name", "due_at", unique=True),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), nullable=False)
    due_at: Mapped[dt.datetime] = mapped_column(tables.MICROSECONDS, nullable=False)

    def __repr__(self) -> str:
        return f"<Tick {self.name} {self.due_at.isoformat(sep=' ')} (id {self.id})>"


TABLE: sa.Table = Tick.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class Ticks:
    """A periodic worker's eligible query: the ticks of schedule ``name``."""

    name: str

    def __call__(self) -> sa.Select[Any]:
        return sa.select(Tick).where(Tick.name == self.name)


def server_now(conn: Connection) -> dt.datetime:
    """The database server's current time, naive UTC (one round trip)."""
    return _datetime(conn.execute(sa.select(dialects.of(conn).now())).scalar_one())


def last_due(conn: Connection, name: str) -> dt.datetime | None:
    """The latest due time inserted for schedule ``name`` (None: none yet)."""
    value = conn.execute(sa.select(sa.func.max(TABLE.c.due_at)).where(TABLE.c.name == name)).scalar()
    return None if value is None else _datetime(value)


def _datetime(value: Any) -> dt.datetime:
    # SQLite hands back its own text for the server-clock expression and for max().
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def insert(conn: Connection, name: str, due_times: Iterable[dt.datetime]) -> int:
    """Insert a tick for each due time that has none; commits; returns how many this call inserted.

    A due time another coordinator inserted first is left alone (the unique index decides).
    """
    statement = dialects.of(conn).insert_ignoring_duplicate(TABLE, "name", "due_at")
    count = 0
    with committed(conn):
        for due_at in due_times:
            if dialects.inserted(conn.execute(statement.values(name=name, due_at=due_at))):
                count += 1
    return count


def prune(conn: Connection, name: str, work_table: sa.Table, *, before: dt.datetime) -> int:
    """Delete schedule ``name``'s ended ticks (finished or failed) due before ``before``, with
    their work rows; the schedule's latest tick stays (it says where catch-up starts).
    Commits each batch; returns how many ticks it deleted.
    """
    latest = last_due(conn, name)
    if latest is None:
        return 0
    w = work_table.c
    ended = (
        sa.select(TABLE.c.id)
        .join(work_table, w.source_id == TABLE.c.id)
        .where(TABLE.c.name == name, TABLE.c.due_at < before, TABLE.c.due_at < latest, w.execution_status.in_(_ENDED))
        .limit(tuning.TICKS_PRUNE_BATCH)
    )
    total = 0
    while True:
        with committed(conn):
            ids = list(conn.execute(ended).scalars())
            if ids:
                items.forget(conn, work_table, ids)
                conn.execute(
                    sa.delete(TABLE).where(
                        TABLE.c.id.in_(ids), ~sa.select(w.source_id).where(w.source_id == TABLE.c.id).exists()
                    )
                )
        total += len(ids)
        if len(ids) < tuning.TICKS_PRUNE_BATCH:
            return total


def last_result(conn: Connection, name: str, work_table: sa.Table) -> dict[str, Any] | None:
    """The latest tick of schedule ``name`` that ended (finished or failed): its id, due
    time, status and error (None: none ended yet).
    """
    w = work_table.c
    query = (
        sa.select(TABLE.c.id, TABLE.c.due_at, w.execution_status, w.error)
        .join(work_table, w.source_id == TABLE.c.id)
        .where(TABLE.c.name == name, w.execution_status.in_(_ENDED))
        .order_by(TABLE.c.due_at.desc())
        .limit(1)
    )
    row = conn.execute(query).first()
    if row is None:
        return None
    return {"tick": row.id, "due_at": _datetime(row.due_at), "execution_status": row.execution_status, "error": row.error}
