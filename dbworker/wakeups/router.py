"""Which claim loop a wake-up reaches: notifications, commits seen, items that ended.

The coordinator builds one router per start and hands it every wake-up source: a
PostgreSQL notification's payload (``sql.notify`` says what it means), SQLite's commit
watcher, and each item its own loops saw end. Workers wait for others only where their
eligible queries say so (``dependencies``), so an independent worker's items end with no
wake-up traffic at all. The router holds no connection; announcing to other coordinators
is the listener's or the change feed's job (``announce``, given with the loops to ``attach``).

Anyone allowed to connect to PostgreSQL may ``NOTIFY dbworker``: a payload's keys are
checked against its table's key type (``keys.is_text_form``) before any loop is woken by
them, so a key such as ``1e5`` for an integer key never reaches a claim's SQL. Malformed
payloads (and those naming nothing registered here) are ignored, counted
(``Observer.notification_ignored``) and logged at most once a minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from dbworker.observe import Observer
from dbworker.sql import keys as key_texts
from dbworker.sql import notify
from dbworker.wakeups import dependencies
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")
IGNORED_LOG_SECONDS = 60.0  # ignored notifications are logged at most this often
_SHOWN_CHARS = 120  # of an ignored payload, in the log line


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

    def __init__(
        self, registered: Iterable[RegisteredWorker], *, observer: Observer | None = None, dialect: Dialect | None = None
    ) -> None:
        workers = list(registered)
        self._tables: dict[str, sa.Table] = {w.name: w.key.table for w in workers}
        self._sources = list(dict.fromkeys(w.key.table for w in workers))  # each source table once
        self._observer = observer
        self._dialect = dialect  # keys are checked as this database writes them
        self._ignored_lock = threading.Lock()
        self._ignored_unlogged: dict[str, int] = {}  # by reason, since its last log line
        self._ignored_logged_at: dict[str, float] = {}
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
        """A notification from another session (see ``sql.notify`` for the payloads); one that
        is malformed or names nothing registered here is ignored (``_ignore``)."""
        try:
            if not self._route(payload):
                self._ignore(payload, "foreign", "it names no table or worker registered here")
        except notify.Malformed as exc:
            self._ignore(payload, "malformed", str(exc))

    def _route(self, payload: str) -> bool:
        """Wake the loops ``payload`` concerns; False when it names nothing registered here."""
        if payload.startswith(notify.DONE + ":"):
            worker, _, ended_key = payload[len(notify.DONE) + 1 :].partition(" ")
            table = self._tables.get(worker)  # None: another application's (waiters of any worker wake)
            named = self._checked(table, [ended_key]) if ended_key and table is not None else ()
            self._wake_waiters(worker, key=named[0] if named else None)
            return True
        found = False
        for table in self._sources:
            if payload.startswith(notify.AGAIN + ":"):  # an item claimable again
                changed, texts = notify.claimable_again(payload, table.name)
            else:  # a source table changed (a row of it, if the payload names its key)
                changed, texts = notify.source_change(payload, table.name)
            if not changed:
                continue
            found = True
            named = self._checked(table, texts)
            for loop in self._loops:
                if loop.worker.key.table is table:
                    loop.wake(*named, again=payload.startswith(notify.AGAIN + ":"))
        return found

    def _checked(self, table: sa.Table, texts: Sequence[str]) -> tuple[str, ...]:
        """``texts`` if each is a key of ``table`` as written by this database; () when its key
        type has no checked text form (the wake-up then names no row); else ``Malformed``."""
        [column] = list(table.primary_key.columns)
        for text in texts:
            ok = key_texts.is_text_form(text, column, self._dialect)
            if ok is None:
                return ()
            if not ok:
                raise notify.Malformed(f"{text[:40]!r} is not a key of {table.name}")
        return tuple(texts)

    def _ignore(self, payload: str, reason: str, why: str) -> None:
        """Count an ignored notification; log it unless one of its reason was logged in the
        last minute: malformed ones as warnings, foreign ones (another application's, on a
        shared database) at INFO."""
        if self._observer is not None:
            self._observer.notification_ignored(reason=reason)
        now = time.monotonic()
        with self._ignored_lock:
            last = self._ignored_logged_at.get(reason)
            if last is not None and now - last < IGNORED_LOG_SECONDS:
                self._ignored_unlogged[reason] = self._ignored_unlogged.get(reason, 0) + 1
                return
            more = self._ignored_unlogged.pop(reason, 0)
            self._ignored_logged_at[reason] = now
        shown = payload[:_SHOWN_CHARS] + ("..." if len(payload) > _SHOWN_CHARS else "")
        log.log(
            logging.WARNING if reason == "malformed" else logging.INFO,
            "dbworker: ignored a wake-up notification (%s: %s): %r%s; counted in "
            "dbworker_notifications_ignored_total, logged at most once a minute",
            reason, why, shown, f" (and {more} more since the last one logged)" if more else "",
        )  # fmt: skip

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
