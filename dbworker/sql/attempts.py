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
from sqlalchemy.engine import Connection, Dialect

from dbworker.sql import dialects, pauses, statements, times
from dbworker.sql.due import Due
from dbworker.sql.precompiled import Precompiled

# lookup's statements, built once: (id of the work table, worker, limit, server, window).
_LOOKUPS: dict[tuple[int, str, int, str, float | None], tuple[sa.Table, Precompiled]] = {}


def due(conn: Connection, table: sa.Table, limit: int, *, overdue: float | None = None) -> list[tuple[Any, float]]:
    """Up to ``limit`` waiting items, soonest first: (source_id, seconds until due; <= 0 is due).

    ``overdue``: leave out items due more than that many seconds ago (waiting rows the
    eligible query excludes would otherwise fill the limit; the sweep finds the rest).
    Read through the ``not_before`` index on the server's clock, in a transaction of its own.
    """
    caps = dialects.of(conn)
    query = _waiting(table, caps, conn.dialect, limit, overdue).add_columns(caps.now().label("dbw_now"))
    with conn.begin():
        rows = conn.execute(query).all()
    return [(sid, _seconds(not_before, now)) for sid, not_before, now in rows]


def lookup(conn: Connection, table: sa.Table, worker: str, limit: int, *,
           overdue: float | None = None) -> tuple[bool, list[tuple[Any, float]]]:  # fmt: skip
    """Whether ``worker`` is paused, and ``due``'s waiting items, in one statement: what
    every idle claim loop reads once a second (``tuning.LOOKUP_SECONDS``), so one round
    trip and one statement for the server where two were. Built once per table, worker and
    server, and sent as compiled driver SQL (``Precompiled``): per lookup, SQLAlchemy's
    work for a statement of two subqueries would cost more than the server's. On PostgreSQL
    its values are in its text, so the server plans it once: with the window bound as a
    parameter it planned every lookup again (a third of the CPU it costs the server)."""
    caps = dialects.of(conn)
    cache_key = (id(table), worker, limit, caps.name, overdue)
    built = _LOOKUPS.get(cache_key)
    if built is None or built[0] is not table:
        statement = lookup_query(table, worker, limit, overdue=overdue, dialect=conn.dialect)
        built = _LOOKUPS[cache_key] = (table, Precompiled(statement, literal=caps.plans_fixed_statements_once))
    with conn.begin():
        rows: list[Any] = list(built[1].execute(conn, {}).all())
    return bool(rows[0][0]), [(sid, _seconds(at, now)) for _, now, sid, at in rows if at is not None]


def lookup_query(table: sa.Table, worker: str, limit: int, *, overdue: float | None,
                 dialect: Dialect) -> sa.Select[Any]:  # fmt: skip
    """``lookup``'s statement: (paused, now, source_id, not_before) rows, soonest first. The
    pause comes from a one-row anchor the waiting items are left-joined to, so it is read
    when none wait (one row of NULL items)."""
    caps = dialects.capabilities(dialect)
    waiting = _waiting(table, caps, dialect, limit, overdue).subquery("dbw_waiting")
    anchor = sa.select(pauses.paused(worker).label("dbw_paused"), caps.now().label("dbw_now")).subquery("dbw_anchor")
    return (
        sa.select(anchor.c.dbw_paused, anchor.c.dbw_now, waiting.c.source_id, waiting.c.not_before)
        .select_from(anchor.outerjoin(waiting, sa.true()))
        .order_by(waiting.c.not_before)
    )


def _waiting(table: sa.Table, caps: dialects.Capabilities, dialect: Dialect, limit: int,
             overdue: float | None) -> sa.Select[Any]:  # fmt: skip
    """The waiting items ``due`` reads: (source_id, not_before), soonest first."""
    w = table.c
    return (
        sa.select(w.source_id, w.not_before)
        .where(w.not_before.is_not(None) if overdue is None else w.not_before > caps.now_plus(-overdue))
        # A time Python cannot hold (stored by an earlier release, or by hand) is never due
        # in practice: left out, so the lookup never fails on it (see ``times``).
        .where(times.within_reach(w.not_before, dialect))
        .order_by(w.not_before)
        .limit(limit)
    )


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
