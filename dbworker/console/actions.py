"""The console's actions: retry, cancel, retry all, pause and resume, each logged with who.

Each is one transaction through the worker view (the same calls as ``dbworker retry``,
``cancel``, ``pause`` and ``resume``), committed here. The log line names the caller (the
token's name, ``local`` without tokens), the action, the worker and the item.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import orm

import dbworker
from dbworker.workers import WorkerView

log = logging.getLogger("dbworker.console")

ACTIONS = ("retry", "cancel", "retry-all", "pause", "resume")


def retry(coordinator: dbworker.Coordinator, worker: str, source_id: Any, *, who: str) -> bool:
    """Reset a failed item; True if it was failed."""
    return bool(_act(coordinator, worker, who, "retry", source_id, lambda v, s: v.reset_failed(s, source_id)))


def cancel(coordinator: dbworker.Coordinator, worker: str, source_id: Any, *, who: str) -> bool:
    """Cancel an item that is not finished or failed; True if it cancelled something."""
    return bool(_act(coordinator, worker, who, "cancel", source_id, lambda v, s: v.cancel(s, source_id)))


def retry_all(coordinator: dbworker.Coordinator, worker: str, *, who: str) -> int:
    """Reset every failed item of ``worker``; how many."""
    return int(_act(coordinator, worker, who, "retry-all", None, lambda v, s: v.reset_all_failed(s)))


def pause(coordinator: dbworker.Coordinator, worker: str, *, who: str) -> bool:
    """Pause ``worker`` in every pod; True if it was not paused."""
    return bool(_act(coordinator, worker, who, "pause", None, lambda v, s: v.pause(s, by=who)))


def resume(coordinator: dbworker.Coordinator, worker: str, *, who: str) -> bool:
    """Resume ``worker`` in every pod; True if it was paused."""
    return bool(_act(coordinator, worker, who, "resume", None, lambda v, s: v.resume(s)))


def _act(
    coordinator: dbworker.Coordinator,
    worker: str,
    who: str,
    action: str,
    source_id: Any,
    do: Callable[[WorkerView, orm.Session], Any],
) -> Any:
    view = coordinator.workers[worker]
    with orm.Session(coordinator.engine) as session:
        result = do(view, session)
        session.commit()
    item = "" if source_id is None else f" item {source_id!r}"
    log.info("console: %s: %s worker %r%s: %s", who, action, worker, item, _outcome(action, result))
    return result


def _outcome(action: str, result: Any) -> str:
    if action == "retry-all":
        return f"{result} item(s) reset"
    if action == "retry":
        return "reset" if result else "not failed, left alone"
    if action == "cancel":
        return "cancelled" if result else "finished or failed already, left alone"
    if action == "pause":
        return "paused" if result else "was paused already"
    return "resumed" if result else "was not paused"
