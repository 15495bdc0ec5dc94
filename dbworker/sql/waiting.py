"""Items of a worker with limits that wait only on a limit: how many, and the keys most behind.

What ``inspect``, the console and the ``dbworker_limit_waiting_items`` gauge show
(docs/limits.md). An item waits only on a limit when it is claimable (the eligible query
has it and no work record blocks it) but no pod could start it now: the backlog
(``limited.startable``) does not count it. Keys are the first keyed limit's (the one claims
take turns between); there can be any number of them, so only the ``top`` most behind are
read, and only among the first ``cap`` claimable items.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker import limits as limits_
from dbworker.limits import Limit
from dbworker.sql import candidates, dialects, limited, slots, statements, transactions

TOP_KEYS = 10


@dataclass(frozen=True)
class WaitingKey:
    """A key of the first keyed limit: its claimable items no pod can start now (``waiting``)
    and the slots of that limit its items hold now (``held``: running items for a concurrency
    limit, else starts within the rate's period)."""

    key: str
    waiting: int
    held: int


@dataclass(frozen=True)
class Waiting:
    """``count`` claimable items wait only on a limit (of the first ``cap`` claimable ones;
    ``capped``: there were that many), and the keys most behind, most first; ``key_name``:
    the keyed limit's column name ('' for a SQL expression or no keyed limit)."""

    count: int
    capped: bool
    keys: tuple[WaitingKey, ...]
    key_name: str = ""


def on_limit(
    conn: Connection, *, table: sa.Table, key: sa.Column[Any], eligible: Callable[[], sa.Select[Any]] | None,
    limits: Sequence[Limit], cap: int, top: int = TOP_KEYS,
) -> Waiting:  # fmt: skip
    """How many of the first ``cap`` claimable items of a worker with ``limits`` wait only on
    a limit, and up to ``top`` keys with the most such items.

    Locks: none (plain reads in a transaction of their own).
    """
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    base = statements.eligible_query(eligible, key)
    claimable = candidates.narrow(st, key, base.order_by(None), swept=False)
    fair = limits_.fair_limit(limits)
    with transactions.committed(conn):
        total = int(conn.execute(sa.select(sa.func.count()).select_from(claimable.limit(cap).subquery())).scalar_one())
        keys = _top(conn, table, claimable, limits, fair, caps, cap=cap, top=top) if fair is not None and top > 0 else ()
    startable = limited.startable(conn, table=table, key=key, eligible=eligible, limits=limits, cap=cap)
    name = getattr(limits[fair].key, "name", None) if fair is not None else None
    return Waiting(count=max(total - startable, 0), capped=total >= cap, keys=keys,
                   key_name=name if isinstance(name, str) else "")  # fmt: skip


def _top(
    conn: Connection, table: sa.Table, claimable: sa.Select[Any], limits: Sequence[Limit], fair: int,
    caps: dialects.Capabilities, *, cap: int, top: int,
) -> tuple[WaitingKey, ...]:  # fmt: skip
    """The ``top`` keys of limit ``fair`` with the most claimable items no pod can start now:
    past the key's free slots, and past what one round takes of a key (``limits.per_key``)."""
    lim = limits[fair]
    kind = next(k for k in limits_.kinds(limits) if k.limit == fair)  # concurrency first
    rows = claimable.add_columns(limited.key_column(lim).label("dbw_k")).limit(cap).subquery()
    n = sa.func.count().label("dbw_n")
    grouped = sa.select(rows.c.dbw_k, n).group_by(rows.c.dbw_k).subquery()
    held = limited.held(slots.slots_table(table), table, grouped.c.dbw_k, kind, caps)
    startable = limits_.per_key(limits, fair, cap)
    free = sa.case((held >= startable, 0), else_=startable - held) if kind.per is None else sa.literal(startable)
    waiting = sa.case((grouped.c.dbw_n > free, grouped.c.dbw_n - free), else_=0).label("dbw_waiting")
    query = (
        sa.select(grouped.c.dbw_k, waiting, held.label("dbw_held"))
        .where(waiting > 0)
        .order_by(waiting.desc(), grouped.c.dbw_k)
        .limit(top)
    )
    return tuple(WaitingKey(str(k), int(w), int(h)) for k, w, h in conn.execute(query).all())
