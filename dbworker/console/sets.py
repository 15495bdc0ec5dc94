"""Acting on every item a filter matches: retry, cancel, run again, in bounded batches.

Each batch reads at most ``BATCH`` keys (keyset, highest first, through the filter's
indexes) and changes them in one short transaction, so the work table is never locked for
long and running claims go on between batches. Each action leaves one audit line
(``sql.audit``: who, the filter, how many) and one log line. ``count`` is what the
confirmation states.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

import dbworker
from dbworker.console import filters
from dbworker.sql import audit, browse, items, tables, upgrade

log = logging.getLogger("dbworker.console")

BATCH = 500  # keys read and changed per transaction
COUNT_CAP = 100_000  # the confirmation counts up to this
# What each action applies to: the statuses it changes (others in a filter are left alone).
ACTIONS = {
    "retry": ("failed",),  # back to unfinished, error and attempts cleared
    "cancel": ("working", "unfinished"),  # failed with the error "cancelled"; a running handler ends
    "run-again": ("finished", "failed"),  # back to unfinished: the handler runs again, a new step
}
VERBS = {"retry": "Retry", "cancel": "Cancel", "run-again": "Run again"}


def statuses(action: str, where: filters.ItemFilter) -> list[str]:
    """The statuses ``action`` changes among those ``where`` selects (none: it matches nothing)."""
    return [s for s in ACTIONS[action] if where.status in (None, s)]


def _keys(coordinator: dbworker.Coordinator, worker: str, where: filters.ItemFilter, action: str,
          *, below: Any, limit: int) -> sa.Select[Any]:  # fmt: skip
    view = coordinator.workers[worker]
    source = tables.source_key(view.source).table
    query = browse.page_query(view.table, statuses=statuses(action, where), before=below, limit=limit - 1,
                              conditions=where.conditions(view.table, source),
                              source=source if where.needs_source else None)  # fmt: skip
    return query.with_only_columns(view.table.c.source_id)


def count(coordinator: dbworker.Coordinator, worker: str, where: filters.ItemFilter, action: str) -> int:
    """How many items ``action`` would change now (at most ``COUNT_CAP`` + 1: more than the cap)."""
    if not statuses(action, where):
        return 0
    found = _keys(coordinator, worker, where, action, below=None, limit=COUNT_CAP + 1).subquery()
    with coordinator.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(found)).scalar_one())


def act(coordinator: dbworker.Coordinator, worker: str, where: filters.ItemFilter, action: str, *, who: str) -> int:
    """Apply ``action`` to every item ``where`` matches, ``BATCH`` at a time; how many changed.
    Items that change status meanwhile are left alone (each batch checks the status again)."""
    if upgrade.missing(coordinator.engine, [audit.TABLE]):
        upgrade.ensure(coordinator.engine, [audit.TABLE])
    view = coordinator.workers[worker]
    table, source_table = view.table, tables.source_key(view.source).table.name
    changed, below = 0, None
    while statuses(action, where):
        with orm.Session(coordinator.engine) as session:
            keys = list(session.execute(_keys(coordinator, worker, where, action, below=below, limit=BATCH)).scalars())
            if keys:
                chosen = table.c.source_id.in_(keys)
                if action == "cancel":
                    changed += items.cancel_records(session.connection(), table, keys)
                else:
                    changed += items.reset(session, table, chosen, source_table=source_table,
                                           statuses=ACTIONS[action])  # fmt: skip
            session.commit()
        if len(keys) < BATCH:
            break
        below = keys[-1]
    text = "&".join(f"{k}={v}" for k, v in where.params())
    with coordinator.engine.begin() as conn:
        audit.record(conn, who=who, worker=worker, action=action, filter_text=text, count=changed)
    log.info("console: %s: %s worker %r items matching %r: %d item(s) changed", who, action, worker, text or "(all)", changed)
    return changed


def recent(coordinator: dbworker.Coordinator, worker: str) -> list[dict[str, Any]]:
    """The worker's latest actions on sets, newest first (none before the first one)."""
    if upgrade.missing(coordinator.engine, [audit.TABLE]):
        return []
    with coordinator.engine.connect() as conn:
        return audit.recent(conn, worker)
