"""Ended items waiting to be announced to other coordinators, batched by worker.

The router hands every ended item that some worker waits for to the listener (PostgreSQL)
or the change feed; both keep them here until their thread sends them as ``done:``
payloads (``sql.notify.done_payloads``), one statement per batch. A worker's batch names
its keys up to ``tuning.MAX_ANNOUNCED_KEYS``, then "some" (None): its waiters sweep.
"""

from __future__ import annotations

import threading

from dbworker import tuning


def add_ended(ended: dict[str, set[str] | None], worker: str, key: str | None) -> None:
    """Add an ended item of ``worker`` (``key`` as text) to a batch of announcements: its
    keys, or None for "some" (too many, or a key without a text form)."""
    keys = ended.get(worker, set())
    if keys is not None and key is not None and len(keys) < tuning.MAX_ANNOUNCED_KEYS:
        keys.add(key)
        ended[worker] = keys
    else:
        ended[worker] = None


def merge_ended(into: dict[str, set[str] | None], ended: dict[str, set[str] | None]) -> None:
    """Add a batch back into ``into`` (one whose announcement failed: sent with the next)."""
    for worker, keys in ended.items():
        for key in keys if keys is not None else [None]:
            add_ended(into, worker, key)


class EndedBatch:
    """Ended items waiting to be announced, by worker (any thread): the listener's and the
    change feed's. ``take`` empties it; a batch whose announcement failed is ``put_back``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended: dict[str, set[str] | None] = {}

    def add(self, worker: str, key: str | None) -> None:
        with self._lock:
            add_ended(self._ended, worker, key)

    def take(self) -> dict[str, set[str] | None]:
        with self._lock:
            ended, self._ended = self._ended, {}
        return ended

    def put_back(self, ended: dict[str, set[str] | None]) -> None:
        with self._lock:
            merge_ended(self._ended, ended)
