"""The lifecycle statements: failed attempts (retried or final), delayed work, cancel, due times
(of waiting items, and of source rows with a due column).

Every write here is fenced by the claim token like ``claims.complete`` (cancel excepted: it
ends whatever claim there is). Times are computed on the server's clock. ``attempts``
counts the invocations of an item's current step: a claim adds one, and it starts again at
0 when the handler returns ``Unfinished`` or the item is reset. ``not_before`` is set only
on ``unfinished`` items that wait (a retry delay, ``Unfinished(after=)``), so the due-time
lookup reads the ``not_before`` index alone, whatever the history.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker import messages, retries
from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, statements, tables
from dbworker.sql.claims import Claim
from dbworker.sql.due import Due
from dbworker.sql.transactions import committed

CANCELLED = "cancelled"  # the error text of a cancelled item

_WORKING = ExecutionStatus.WORKING.value
_UNFINISHED = ExecutionStatus.UNFINISHED.value
_FAILED = ExecutionStatus.FAILED.value
_DONE = (ExecutionStatus.FINISHED.value, _FAILED)


def _held(table: sa.Table, claim: Claim) -> sa.ColumnElement[bool]:
    w = table.c
    return sa.and_(w.source_id == claim.source_id, w.claim_token == claim.token, w.execution_status == _WORKING)


def _clip(text: str | None) -> str | None:
    if text is not None and len(text) > tables.ERROR_MAX_CHARS:
        return text[: tables.ERROR_MAX_CHARS - 20] + "\n... (truncated)"
    return text


def attempts_of(conn: Connection, table: sa.Table, claim: Claim) -> int | None:
    """The attempt ``claim`` runs (1-based), or None when it is no longer the item's claim."""
    found = conn.execute(sa.select(table.c.attempts).where(_held(table, claim))).first()
    return None if found is None else max(1, int(found[0] or 0))


def fail(
    conn: Connection,
    table: sa.Table,
    claim: Claim,
    *,
    error: str,
    traceback: str | None = None,
    retry: retries.Retry | None = None,
    exc: BaseException | None = None,
    attempt: int | None = None,
) -> tuple[str, float | None]:
    """Record a failed attempt of ``claim``: ``messages.RETRIED`` (unfinished, not before its
    delay) with the delay in seconds, ``messages.FAILED``, or ``messages.LOST`` when the claim
    is no longer current.

    ``exc`` is the handler's exception (None: its process died or timed out); ``attempt``
    the attempt's number when the caller knows it. Commits.
    """
    caps = dialects.of(conn)
    with committed(conn):
        if retry is not None and attempt is None:
            attempt = attempts_of(conn, table, claim)
            if attempt is None:
                return messages.LOST, None
        wait = None if attempt is None else retries.decide(retry, attempt=attempt, exc=exc, draw=random.random())
        values: dict[str, Any] = {
            "claim_token": None,
            "lease_expires_at": None,
            "error": _clip(error),
            "traceback": _clip(traceback),
        }
        if wait is None:
            values |= {"execution_status": _FAILED, "not_before": None, "ended_at": caps.now()}
        else:
            values |= {"execution_status": _UNFINISHED, "not_before": caps.now_plus(wait)}
        done = conn.execute(sa.update(table).where(_held(table, claim)).values(**values)).rowcount == 1
    if not done:
        return messages.LOST, None
    return (messages.FAILED, None) if wait is None else (messages.RETRIED, wait)


def unfinished(conn: Connection, table: sa.Table, claim: Claim, *, after: float) -> bool:
    """Record ``Unfinished(after=...)`` for ``claim`` if it is still current; no commit.

    As ``statements.step_over`` (the next step's attempts start at 0), and the item waits
    ``after`` seconds on the server's clock.
    """
    update = statements.step_over(table).values(not_before=dialects.of(conn).now_plus(after))
    params = {"dbw_sid": claim.source_id, "dbw_token": claim.token}
    return bool(conn.execute(update, params).rowcount == 1)


def cancel(conn: Connection, table: sa.Table, source_id: Any) -> bool:
    """Mark ``source_id`` FAILED with the error ``cancelled`` unless it is FINISHED or FAILED,
    a never-claimed item included (it gets a record, so it will not run; an id with no source
    row is not one); no commit.

    A running handler loses its claim: the record keeps the token ``cancelled`` (never a
    claim's), so its pod's next lease renewal finds the claim held by another and ends the
    handler, and the fence discards whatever it would commit. True if something was cancelled.
    """
    w = table.c
    values = {"execution_status": _FAILED, "claim_token": CANCELLED, "lease_expires_at": None,
              "error": CANCELLED, "traceback": None, "not_before": None,
              "ended_at": dialects.of(conn).now()}  # fmt: skip
    update = sa.update(table).where(w.source_id == source_id, w.execution_status.not_in(_DONE)).values(**values)
    for _ in range(2):
        if conn.execute(update).rowcount == 1:
            return True
        if conn.execute(sa.select(w.execution_status).where(w.source_id == source_id)).first() is not None:
            return False  # finished or failed already
        key = next(iter(w.source_id.foreign_keys)).column
        if conn.execute(sa.select(sa.literal(1)).where(key == source_id)).first() is None:
            return False  # no such source row: nothing to cancel
        insert = dialects.of(conn).insert_ignoring_duplicate(table, "source_id").values(
            source_id=source_id, attempts=0, **values
        )
        if dialects.inserted(conn.execute(insert)):
            return True
        # A first claim won the race for the record: cancel that claim instead.
    return False


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
