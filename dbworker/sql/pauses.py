"""The fleet-wide pause of workers: the ``dbworker_paused`` table, one row per paused worker.

A row means every coordinator stops claiming for that worker (running handlers finish);
each claim loop reads the table every ``tuning.LOOKUP_SECONDS`` at most. The table is
dbworker's own (not in the application's MetaData) and is created by the same idempotent
upgrade as the work tables. Nothing here commits (the caller does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects

TABLE_NAME = "dbworker_paused"
BY_LENGTH = 255

METADATA = sa.MetaData()
TABLE = sa.Table(
    TABLE_NAME,
    METADATA,
    sa.Column("worker", sa.String(64), primary_key=True),
    sa.Column("paused_at", sa.DateTime(), nullable=False, server_default=sa.func.current_timestamp()),
    # Who paused it, as the tool that did says (a console token's name, "cli"); never a secret.
    sa.Column("paused_by", sa.String(BY_LENGTH), nullable=True),
)


@dataclass(frozen=True)
class Pause:
    """One paused worker: since when (the server's clock) and by whom."""

    worker: str
    paused_at: datetime
    paused_by: str | None


def read(conn: Connection) -> dict[str, Pause]:
    """Every paused worker by name."""
    rows = conn.execute(sa.select(TABLE.c.worker, TABLE.c.paused_at, TABLE.c.paused_by)).all()
    return {r[0]: Pause(r[0], r[1], r[2]) for r in rows}


def is_paused(conn: Connection, worker: str) -> bool:
    """Whether ``worker`` is paused (one primary-key probe)."""
    return bool(conn.execute(sa.select(paused(worker))).scalar())


def paused(worker: str) -> sa.Exists:
    """``is_paused`` as an expression, for a statement that reads more (``attempts.lookup``)."""
    return sa.exists().where(TABLE.c.worker == worker)


def pause(conn: Connection, worker: str, *, by: str | None) -> bool:
    """Pause ``worker`` everywhere; True if it was not paused already."""
    caps = dialects.of(conn)
    result = conn.execute(
        caps.insert_ignoring_duplicate(TABLE, "worker").values(worker=worker, paused_by=(by or None) and by[:BY_LENGTH])
    )
    return dialects.inserted(result)


def resume(conn: Connection, worker: str) -> bool:
    """Resume ``worker`` everywhere; True if it was paused."""
    return int(conn.execute(sa.delete(TABLE).where(TABLE.c.worker == worker)).rowcount or 0) > 0
