"""Reading recorded statuses: ``execution_status()`` and the ``has_execution_status()`` EXISTS.

Both only build or run plain queries on the work table; neither commits nor changes anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker.contract import ExecutionStatus


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
    """The whole work record of ``source_id`` as a mapping, or None if it was never claimed."""
    row = session.execute(sa.select(table).where(table.c.source_id == source_id)).mappings().one_or_none()
    if row is None:
        return None
    state = dict(row)
    state["execution_status"] = ExecutionStatus(state["execution_status"])
    return state


def counts(session: Session, table: sa.Table) -> dict[ExecutionStatus, int]:
    """How many items are in each status (every status present, 0 when none)."""
    rows = session.execute(
        sa.select(table.c.execution_status, sa.func.count()).group_by(table.c.execution_status)
    ).all()
    found = {ExecutionStatus(status): int(n) for status, n in rows}
    return {s: found.get(s, 0) for s in ExecutionStatus}
