"""When waiting items are due: of items that wait (a retry delay, ``Unfinished(after=)``),
and of source rows with a due column. Reads only; the writes that make items wait are
``items``' (``wait_for_retry``, ``unfinish``).

Times are computed on the server's clock. ``not_before`` is set only on ``unfinished``
items that wait, so the due-time lookup reads the ``not_before`` index alone, whatever the
history. (``attempts`` counts the invocations of an item's current step: a claim adds one,
and it starts again at 0 when the handler returns ``Unfinished`` or the item is reset.)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects, statements, times
from dbworker.sql.due import Due


def due(conn: Connection, table: sa.Table, limit: int, *, overdue: float | None = None) -> list[tuple[Any, float]]:
    """Up to ``limit`` waiting items, soonest first: (source_id, seconds until due; <= 0 is due).

    ``overdue``: leave out items due more than that many seconds ago (waiting rows the
    eligible query excludes would otherwise fill the limit; the sweep finds the rest).
    Read through the ``not_before`` index on the server's clock, in a transaction of its own.
    """
    caps = dialects.of(conn)
    w = table.c
    query = (
        sa.select(w.source_id, w.not_before, caps.now().label("dbw_now"))
        .where(w.not_before.is_not(None) if overdue is None else w.not_before > caps.now_plus(-overdue))
        # A time Python cannot hold (stored by an earlier release, or by hand) is never due
        # in practice: left out, so the lookup never fails on it (see ``times``).
        .where(times.within_reach(w.not_before, conn.dialect))
        .order_by(w.not_before)
        .limit(limit)
    )
    with conn.begin():
        rows = conn.execute(query).all()
    return [(sid, _seconds(not_before, now)) for sid, not_before, now in rows]


def source_due(conn: Connection, table: sa.Table, due: Due, limit: int, *, within: float) -> list[tuple[Any, float]]:
    """``due`` for a worker's due column: up to ``limit`` claimable source rows (the
    application's eligible query, no work record keeping them) due within ``within``
    seconds of now either way, soonest first.

    The window keeps the read to a range of the application's index on the column: not
    the finished history before it, nor rows due later (the next lookup sees those).
    """
    caps = dialects.of(conn)
    column = due.column
    query = (
        statements.claimable(table, due.key, due.base(), caps)
        .add_columns(column, caps.now().label("dbw_now"))
        .where(column > caps.now_plus(-within), column <= caps.now_plus(within))
        .where(times.within_reach(column, conn.dialect))
        .order_by(None)
        .order_by(column)
        .limit(limit)
    )
    with conn.begin():
        rows = conn.execute(query).all()
    return [(sid, _seconds(at, now)) for sid, at, now in rows]


def _seconds(later: dt.datetime | str, now: dt.datetime | str) -> float:
    # SQLite hands back its own text for the server-clock expression: parse both the same way.
    def parse(value: dt.datetime | str) -> dt.datetime:
        return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))

    return (parse(later) - parse(now)).total_seconds()
