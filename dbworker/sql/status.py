"""Statuses outside the claim path: reads, the ``has_execution_status()`` EXISTS, counts, backlog.

Also the failed list. Nothing here writes (resetting failed items is ``items.reset``); the
claim path itself is ``claims``', the claimable query it counts ``statements``'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, history, progress, statements, times
from dbworker.sql.states import UNFINISHED, WORKING


def statuses_values(statuses: Iterable[ExecutionStatus | str]) -> list[str]:
    """The stored values of ``statuses``; ``ValueError`` names an unknown one."""
    values = []
    for s in statuses:
        try:
            values.append(ExecutionStatus(s).value)
        except ValueError:
            known = ", ".join(m.value for m in ExecutionStatus)
            raise ValueError(f"statuses: {s!r} is not an ExecutionStatus (one of: {known})") from None
    return values


def has_status(table: sa.Table, source_id: Any, statuses: Iterable[ExecutionStatus | str]) -> sa.ColumnElement[bool]:
    """EXISTS a work record for ``source_id`` (a value or a correlated column) in ``statuses``."""
    values = statuses_values(statuses)
    if not values:
        return sa.false()
    w = table.c
    return sa.select(sa.literal(1)).where(w.source_id == source_id, w.execution_status.in_(values)).exists()


def read_status(session: Session, table: sa.Table, source_id: Any) -> ExecutionStatus | None:
    """The recorded status of ``source_id``, or None if it was never claimed."""
    value = session.execute(
        sa.select(table.c.execution_status).where(table.c.source_id == source_id)
    ).scalar_one_or_none()
    return None if value is None else ExecutionStatus(value)


def read_state(session: Session, table: sa.Table, source_id: Any) -> dict[str, Any] | None:
    """The whole work record of ``source_id`` as a mapping, or None if it was never claimed;
    with ``progress`` (the latest report: ``fraction``, ``note``, ``at``, or None) and
    ``history`` (its kept attempts, oldest first: ``sql.history.read``)."""
    # Times past what Python holds (stored by an earlier release, or by hand) read as times.LATEST.
    columns = times.readable_columns(table, session.get_bind().dialect)
    row = session.execute(sa.select(*columns).where(table.c.source_id == source_id)).mappings().one_or_none()
    if row is None:
        return None
    state = dict(row)
    state["execution_status"] = ExecutionStatus(state["execution_status"])
    state["progress"] = progress.take(state)
    state["history"] = history.read(session, history.history_table(table), source_id)
    return state


def counts(session: Session, table: sa.Table) -> dict[ExecutionStatus, int]:
    """How many items are in each status (every status present, 0 when none)."""
    rows = session.execute(
        sa.select(table.c.execution_status, sa.func.count()).group_by(table.c.execution_status)
    ).all()
    found = {ExecutionStatus(status): int(n) for status, n in rows}
    return {s: found.get(s, 0) for s in ExecutionStatus}


def backlog(
    conn: Connection,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    *,
    cap: int,
    after: Any = None,
) -> int:
    """How many rows of the eligible query are claimable now, counting at most ``cap``.

    ``after``: a key up to which no row was claimable when the fleet's last wrap looked
    (``sweeps.after``), so the count does not walk the finished history: rows past it, plus
    the items below it claimable again since (given back, reset, done waiting, expired),
    read through the work table's indexes. A row below it enabled since is claimed by key
    within moments and not counted.
    """
    caps = dialects.of(conn)
    query = statements.claimable(table, key, statements.eligible_query(eligible, key), caps, after=after)
    n = int(conn.execute(sa.select(sa.func.count()).select_from(query.limit(cap).subquery())).scalar_one())
    if after is None or n >= cap:
        return n
    w = table.c
    again = sa.select(w.source_id).where(
        w.source_id <= after,
        sa.or_(
            sa.and_(w.execution_status == UNFINISHED,
                    sa.or_(w.not_before.is_(None), w.not_before <= caps.now())),
            sa.and_(w.execution_status == WORKING, w.lease_expires_at <= caps.now()),
        ),
    )  # fmt: skip
    return n + int(conn.execute(sa.select(sa.func.count()).select_from(again.limit(cap - n).subquery())).scalar_one())


def failed(session: Session, table: sa.Table, *, limit: int) -> list[tuple[Any, str | None]]:
    """Up to ``limit`` failed items as (source_id, error), in key order."""
    w = table.c
    rows = session.execute(
        sa.select(w.source_id, w.error)
        .where(w.execution_status == ExecutionStatus.FAILED.value)
        .order_by(w.source_id)
        .limit(limit)
    ).all()
    return [(r[0], r[1]) for r in rows]
