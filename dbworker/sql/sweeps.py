"""The fleet's wraps: ``dbworker_sweeps``, one row per worker, so one pod walks the history.

A wrap (a sweep from the first row) walks the finished history once. Every claim loop of a
worker would wrap on its own schedule; instead a loop whose periodic wrap is due takes the
worker's row (a conditional update on the server's clock) and only the winner walks. It
records the lowest claimable key it found (``low``, as text; the top key when it found
none), where a loop that starts begins its sweep instead of at the first row. The table is
dbworker's own (not in the application's MetaData), created by the same idempotent
upgrade as the work tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects, tables, transactions

TABLE_NAME = "dbworker_sweeps"
METADATA = sa.MetaData()
TABLE = sa.Table(
    TABLE_NAME,
    METADATA,
    sa.Column("worker", sa.String(64), primary_key=True),
    # When the next wrap is due, on the server's clock (naive UTC).
    sa.Column("next_wrap_at", tables.MICROSECONDS, nullable=False),
    # The lowest key the last wrap found claimable, or the top key when it found none
    # ("top:" + key); None before the first wrap finished.
    sa.Column("low", sa.Text(), nullable=True),
)
TOP = "top:"


@dataclass(frozen=True)
class Turn:
    """A loop's ask for the wrap: ``won`` (walk now), else when the fleet's next is due
    (seconds from now) and where the last one left off (``low``)."""

    won: bool
    due_in: float
    low: str | None


def take(conn: Connection, worker: str, *, spacing: float) -> Turn:
    """Take ``worker``'s wrap if it is due (or was never taken), setting the next one
    ``spacing`` seconds from now. One committed transaction.

    Locks: the worker's row, for the conditional update's instant.
    """
    caps = dialects.of(conn)
    c = TABLE.c
    with transactions.committed(conn):
        won = conn.execute(
            sa.update(TABLE)
            .where(c.worker == worker, c.next_wrap_at <= caps.now())
            .values(next_wrap_at=caps.now_plus(spacing))
        ).rowcount == 1
        if not won:
            row = conn.execute(
                sa.select(c.next_wrap_at, c.low, caps.now()).where(c.worker == worker)
            ).first()
            if row is None:
                insert = caps.insert_ignoring_duplicate(TABLE, "worker").values(
                    worker=worker, next_wrap_at=caps.now_plus(spacing)
                )
                won = dialects.inserted(conn.execute(insert))
                row = None if won else conn.execute(
                    sa.select(c.next_wrap_at, c.low, caps.now()).where(c.worker == worker)
                ).first()
    if won or row is None:
        return Turn(True, spacing, None)
    next_at, low, now = row
    return Turn(False, max(0.0, (next_at - now).total_seconds()), low)


def record(conn: Connection, worker: str, low: str | None, *, spacing: float) -> None:
    """Where the winner's wrap left off (see ``TABLE``'s ``low``; None: a key without a text
    form), and the next wrap ``spacing`` seconds from now, once its cost is known. Commits.
    """
    caps = dialects.of(conn)
    with transactions.committed(conn):
        conn.execute(
            sa.update(TABLE).where(TABLE.c.worker == worker).values(low=low, next_wrap_at=caps.now_plus(spacing))
        )


def low(conn: Connection, worker: str) -> str | None:
    """Where ``worker``'s last wrap left off (``TABLE``'s ``low``), if one was recorded."""
    return conn.execute(sa.select(TABLE.c.low).where(TABLE.c.worker == worker)).scalar()


def after(low: str | None, key: sa.Column[Any]) -> Any:
    """``low`` as a key to sweep after: every key up to it was not claimable at the wrap.
    None when unknown, or not expressible (the lowest claimable key of a non-integer type).
    """
    if low is None:
        return None
    value = tables.key_from_text(low.removeprefix(TOP), key)
    if low.startswith(TOP) or value is None:
        return value
    return value - 1 if isinstance(value, int) and not isinstance(value, bool) else None
