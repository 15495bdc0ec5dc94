"""Which claim loop a wake-up reaches: notifications, commits seen, items that ended.

The coordinator builds one router per start and hands it every wake-up source: a
PostgreSQL notification's payload (``sql.notify`` says what it means), SQLite's commit
watcher, and each item its own loops saw end. Workers wait for others only where their
eligible queries say so (``dependencies``), so an independent worker's items end with no
wake-up traffic at all. The router holds no connection; announcing to other coordinators
is the listener's or the change feed's job (``announce``, given with the loops to ``attach``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from dbworker.sql import notify
from dbworker.wakeups import dependencies
from dbworker.workers import RegisteredWorker


class Wakeable(Protocol):
    """A claim loop, as far as wake-ups go."""

    @property
    def worker(self) -> RegisteredWorker: ...

    def wake(self, *keys: str, again: bool = False) -> None: ...


class Router:
    """Routes wake-ups to the loops of one coordinator.

    ``registered``: every worker registered on the coordinator, started here or not
    (other pods start the others, and their items' ends are announced).
    """

    def __init__(self, registered: Iterable[RegisteredWorker]) -> None:
        workers = list(registered)
        self._tables: dict[str, sa.Table] = {w.name: w.key.table for w in workers}
        self._deps = dependencies.dependency_map(workers)  # worker -> the workers it waits for
        # Built once: read for every item that ends.
        self._waiters = dependencies.waiter_map(self._deps)
        self._awaited = dependencies.awaited(self._deps)  # None: any worker may be awaited
        self._loops: Sequence[Wakeable] = ()
        # Tells other coordinators that an item of a worker ended (the listener's or the change feed's).
        self._announce: Callable[[str, str | None], None] | None = None

    def attach(self, loops: Sequence[Wakeable], *, announce: Callable[[str, str | None], None] | None) -> None:
        """The loops to wake (those this coordinator runs), and what tells other
        coordinators that an item ended (None: nothing does, they poll)."""
        self._loops = loops
        self._announce = announce

    def notified(self, payload: str) -> None:
        """A notification from another session (see ``sql.notify`` for the payloads)."""
        if payload.startswith(notify.DONE + ":"):
            worker, _, ended_key = payload[len(notify.DONE) + 1 :].partition(" ")
            self._wake_waiters(worker, key=ended_key or None)
        elif payload.startswith(notify.AGAIN + ":"):  # an item claimable again
            for loop in self._loops:
                named, keys = notify.claimable_again(payload, loop.worker.key.table.name)
                if named:
                    loop.wake(*keys, again=True)
        else:  # a source table changed (a row of it, if the payload names its key)
            for loop in self._loops:
                changed, keys = notify.source_change(payload, loop.worker.key.table.name)
                if changed:
                    loop.wake(*keys)

    def due(self, worker: str) -> None:
        """A due time of ``worker`` came (the tick inserter): its loop claims now."""
        for loop in self._loops:
            if loop.worker.name == worker:
                loop.wake()

    def committed(self) -> None:
        """Something was committed to the database (SQLite's watcher), or may have been unseen
        (the PostgreSQL listener, back after a gap): every loop looks."""
        for loop in self._loops:
            loop.wake()

    def item_done(self, worker: str, source_id: Any = None) -> None:
        """An item of ``worker`` ended here: wake the loops that wait for it, and tell the others.

        An ended item may make another worker's items eligible (``has_execution_status``),
        here or in another coordinator; the worker's own loop claims again by itself.
        """
        key = notify.key_text(source_id)
        self._wake_waiters(worker, skip=worker, key=key)
        if self._announce is not None and (self._awaited is None or worker in self._awaited):
            self._announce(worker, key)

    def _wake_waiters(self, ended: str, *, skip: str | None = None, key: str | None = None) -> None:
        waiting = self._waiters.get(ended, self._waiters[None])
        table = self._tables.get(ended)
        for loop in self._loops:
            if loop.worker.name in waiting and loop.worker.name != skip:
                # The same key of the same source table is the row a waiter most likely waits
                # on (has_execution_status(source_id=Model.id)): claimed by key if the sweep
                # passed it (the loop takes keys in their text form on PostgreSQL only).
                same = (key,) if key is not None and loop.worker.key.table is table else ()
                loop.wake(*same)
