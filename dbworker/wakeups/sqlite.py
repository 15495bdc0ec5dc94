"""SQLite wake-ups: notice other connections' commits without a server to notify us.

``PRAGMA data_version`` changes whenever another connection, in any process, committed to
the database file since the same connection last read it. One thread reads it on a
connection of its own, outside any transaction, and wakes the coordinator's loops when it
changed: a row the application inserts or enables is claimed at once instead of at the
next poll. On Linux the thread sleeps until the kernel reports a write to the database's
files (``inotify``): pick-up within about a millisecond, and no wake-ups at all while
nothing is written. Elsewhere it reads every ``tuning.FIRST_INTERVAL`` seconds after a
change, backing off to ``tuning.MAX_INTERVAL`` while nothing changes. Polling stays as the fallback.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from dbworker import tuning
from dbworker.backoff import Backoff
from dbworker.sql import dialects
from dbworker.wakeups import connection
from dbworker.wakeups.inotify import DirectoryWrites


class DataVersionWatcher:
    """Calls ``on_change()`` when another connection committed to the SQLite file; reconnects after errors."""

    def __init__(self, engine: Engine, on_change: Callable[[], None], *, secrets: tuple[str, ...]) -> None:
        self._engine = engine
        self._on_change = on_change
        self._secrets = secrets
        self._stop = threading.Event()
        self._last: Any = None
        self.thread = threading.Thread(target=self._run, name="dbworker-sqlite-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def drain(self) -> None:
        """Nothing to do: it only wakes loops."""

    def stop(self, deadline: float) -> None:
        """Ask the thread to end; not waited for (it only reads and wakes loops)."""
        self._stop.set()

    def _run(self) -> None:
        connection.serve(self._engine, self._watch, stop=self._stop, what="SQLite change watcher",
                             secrets=self._secrets)  # fmt: skip

    def _watch(self, conn: Any) -> None:
        # The first reading wakes the loops too: a commit may have come while we reconnected.
        # Taken once the files are watched, so a commit just before is read and one just
        # after is reported.
        self._last = None
        files = _database_writes(self._engine.url.database)
        try:
            self._changed(conn)
            if files is None:
                self._poll(conn)
            else:
                self._follow(conn, files)
        finally:
            if files is not None:
                files.close()

    def _changed(self, conn: Any) -> bool:
        """Read data_version; wake the loops when it changed."""
        version = dialects.sqlite_data_version(conn)
        if version == self._last:
            return False
        self._last = version
        self._on_change()
        return True

    def _poll(self, conn: Any) -> None:
        interval = Backoff(tuning.FIRST_INTERVAL, tuning.MAX_INTERVAL)
        while not self._stop.wait(interval.next()):
            if self._changed(conn):
                interval.reset()

    def _follow(self, conn: Any, files: DirectoryWrites) -> None:
        while not self._stop.is_set():
            if not files.wait(tuning.EVENTS_FALLBACK_SECONDS):
                self._changed(conn)
                continue
            # See tuning.SETTLE_*: the step that makes a commit visible is not reported.
            settle = Backoff(tuning.SETTLE_FIRST, tuning.SETTLE_MAX)
            wakes = Backoff(tuning.WAKE_GAP_FIRST, tuning.WAKE_GAP_MAX)
            quiet_until = time.monotonic() + tuning.SETTLE_QUIET
            while time.monotonic() < quiet_until:
                gap = tuning.SETTLE_FIRST
                if self._changed(conn):
                    quiet_until = time.monotonic() + tuning.SETTLE_QUIET
                    gap = wakes.next()
                else:
                    wakes.reset()
                if self._stop.wait(gap):
                    return
                if files.wait(max(0.0, settle.next() - gap)):
                    settle.reset()
                    quiet_until = time.monotonic() + tuning.SETTLE_QUIET


def _database_writes(database: str | None) -> DirectoryWrites | None:
    """Writes to the SQLite file and its WAL and journal; None: not a plain file path, or no inotify."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = os.path.abspath(database)
    directory, name = os.path.split(path)
    if not os.path.isdir(directory):
        return None
    return DirectoryWrites.open(directory, (name, name + "-wal", name + "-journal"))
