"""How many items of a worker are claimable now: the count behind ``Coordinator.backlog``.

Counted from where the fleet's last wrap of the worker left off (``sql.sweeps``), so the
count walks what a sweep would walk and not the finished history below it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dbworker.sql import claims, limited, status, sweeps
from dbworker.sql.dialects import connect
from dbworker.workers import RegisteredWorker


def count(engine: Engine, worker: RegisteredWorker, *, cap: int) -> int:
    """How many items of ``worker`` are claimable now, counting at most ``cap``; with limits,
    not those waiting only on a limit (more pods cannot start them; docs/limits.md)."""
    with connect(engine) as conn:
        if worker.limits:
            return limited.startable(conn, table=worker.table, key=worker.key, eligible=worker.eligible,
                                     limits=worker.limits, cap=cap)  # fmt: skip
        return status.backlog(conn, worker.table, worker.key, worker.eligible, cap=cap, after=_fleet_low(conn, worker))


def _fleet_low(conn: Connection, worker: RegisteredWorker) -> Any:
    """Where the fleet's last wrap of ``worker`` left off, as a key to count after (None:
    unknown, or above the source's top key, as after the table was emptied)."""
    try:
        after = sweeps.after(sweeps.low(conn, worker.name), worker.key)
        conn.rollback()
    except sa.exc.DBAPIError:  # no dbworker_sweeps (not migrated): count it all
        conn.rollback()
        return None
    if after is None:
        return None
    top = claims.top_key(conn, worker.key)
    return after if top is not None and after <= top else None
