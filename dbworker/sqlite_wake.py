"""SQLite wake-ups: notice other connections' commits without a server to notify us.

``PRAGMA data_version`` changes whenever another connection, in any process, committed to
the database file since the same connection last read it. Reading it costs a few
microseconds; waking a thread to read it costs more, so one thread reads it on a
connection of its own, outside any transaction, every ``FIRST_INTERVAL`` seconds after a
change, backing off to ``MAX_INTERVAL`` while nothing changes, and wakes the coordinator's
loops when it changed: a row the application inserts or enables is claimed within about
that interval instead of at the next poll. Polling stays as the fallback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from dbworker import own_connection
from dbworker.backoff import Backoff

FIRST_INTERVAL = 0.02  # while commits come: pick-up within ~20 ms
MAX_INTERVAL = 0.05  # idle: twenty reads a second, about 0.4% of a core here


class DataVersionWatcher:
    """Calls ``on_change()`` when another connection committed to the SQLite file; reconnects after errors."""

    def __init__(self, engine: Engine, on_change: Callable[[], None], *, secrets: tuple[str, ...]) -> None:
        self._engine = engine
        self._on_change = on_change
        self._secrets = secrets
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dbworker-sqlite-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        own_connection.serve(self._engine, self._watch, stop=self._stop, what="SQLite change watcher",
                             secrets=self._secrets)  # fmt: skip

    def _watch(self, conn: Any) -> None:
        # The first reading wakes the loops too: a commit may have come while we reconnected.
        last = None
        interval = Backoff(FIRST_INTERVAL, MAX_INTERVAL)
        while not self._stop.wait(interval.next()):
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            if version != last:
                last = version
                interval.reset()
                self._on_change()
