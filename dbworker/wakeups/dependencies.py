"""Which workers wait for which: read from the work tables their eligible queries mention.

A worker whose ``eligible`` query reads another worker's work table (``has_execution_status``
builds exactly such an EXISTS) may find new items claimable when one of that worker's
items ends. Knowing this lets a coordinator wake, and announce to other coordinators, only
where it matters: an independent worker's items end without any wake-up traffic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.sql import visitors

from dbworker.workers import RegisteredWorker

# A worker whose eligible query could not be built at start: it may depend on anything.
ANY: frozenset[str] = frozenset({"*"})


def waits_for(worker: RegisteredWorker, work_tables: Mapping[sa.Table, str]) -> frozenset[str]:
    """Names of the workers whose work tables ``worker``'s eligible query reads (``ANY`` if
    unknown); a worker with limits waits for itself too: an item of it that ends, in any
    pod, frees its slots for the items waiting on them (docs/limits.md)."""
    own = frozenset({worker.name}) if worker.limits else frozenset()
    if worker.eligible is None:
        return own
    try:
        query = worker.eligible()
    except Exception:  # noqa: BLE001 - it may need application state; claims will say why
        return ANY
    if not isinstance(query, sa.ClauseElement):
        return ANY
    found: set[str] = set()
    for element in visitors.iterate(query):
        if isinstance(element, sa.Table) and element in work_tables:
            found.add(work_tables[element])
    return frozenset(found) | own


def dependency_map(workers: Iterable[RegisteredWorker]) -> dict[str, frozenset[str]]:
    """For every registered worker, the workers it waits for (see ``waits_for``)."""
    registered = list(workers)
    work_tables = {w.table: w.name for w in registered}
    return {w.name: waits_for(w, work_tables) for w in registered}


def waiters(deps: Mapping[str, frozenset[str]], ended: str) -> list[str]:
    """Workers that may have new claimable items when an item of ``ended`` ends."""
    return [name for name, on in deps.items() if ended in on or on is ANY]


def waiter_map(deps: Mapping[str, frozenset[str]]) -> dict[str | None, frozenset[str]]:
    """``waiters`` for every registered worker, computed once; key None: a worker not registered here."""
    found: dict[str | None, frozenset[str]] = {name: frozenset(waiters(deps, name)) for name in deps}
    found[None] = frozenset(name for name, on in deps.items() if on is ANY)
    return found


def awaited(deps: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    """Workers some registered worker waits for; None when any worker may be (an unknown query)."""
    if any(on is ANY for on in deps.values()):
        return None
    return frozenset().union(*deps.values()) if deps else frozenset()
