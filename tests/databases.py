"""PostgreSQL databases for the tests, made one ahead and dropped behind, off the test's time.

Every PostgreSQL test still gets a database of its own that no test used before; only the
server's work moves: ``CREATE DATABASE`` (a WAL-logged copy of the template, fsynced) and
``DROP DATABASE ... WITH (FORCE)`` take about half a second each on the test server, and a
thread of each test process does them while tests run, instead of every test waiting on both.
If the thread has none ready (the first test, a server restarting), ``take`` creates one itself.
Databases made ahead and not taken, and drops still queued, are done when the process exits.
"""

from __future__ import annotations

import atexit
import queue
import secrets
import sys
import threading
import time

from tests import pooler

AHEAD = 1  # databases kept ready: a test takes one at a time
MAKE = ""  # the task that makes one ahead (no database is named "")


def new_name() -> str:
    """A random database name, so tests of parallel processes never collide."""
    return "dbw_" + secrets.token_hex(6)


class Databases:
    """One test process's ready databases and the drops it owes, worked by one thread."""

    def __init__(self) -> None:
        self._ready: queue.Queue[str] = queue.Queue()
        self._tasks: queue.Queue[str | None] = queue.Queue()  # a name to drop, MAKE, or None: stop
        self._thread = threading.Thread(target=self._run, name="test-databases", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def take(self) -> str:
        """A freshly created database's name, for one test."""
        self._tasks.put(MAKE)  # the next one, while this test runs
        try:
            return self._ready.get_nowait()
        except queue.Empty:
            name = new_name()
            pooler.create_database(name)
            return name

    def give_back(self, name: str) -> None:
        """Drop ``name`` (``WITH (FORCE)``: sessions left by killed processes) in the background."""
        self._tasks.put(name)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            if task != MAKE:
                _drop(task)
            elif self._ready.qsize() < AHEAD:
                made = new_name()
                try:
                    pooler.create_database(made)
                except Exception:  # noqa: BLE001 - the server is away (a restart test): take() makes one
                    continue
                self._ready.put(made)

    def close(self) -> None:
        """Finish the queued drops, then drop the databases made ahead and not taken."""
        self._tasks.put(None)
        self._thread.join(timeout=120)
        while True:
            try:
                _drop(self._ready.get_nowait())
            except queue.Empty:
                break


def _drop(name: str) -> None:
    for attempt in range(3):
        try:
            pooler.drop_database(name)
            return
        except Exception as exc:  # noqa: BLE001 - the server is restarting (tests/chaos/test_outage.py)
            if attempt == 2:
                print(f"tests.databases: database {name} left behind: {exc}", file=sys.stderr)
            else:
                time.sleep(2)


_shared: Databases | None = None
_lock = threading.Lock()


def shared() -> Databases:
    """This test process's ``Databases``, started on first use."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = Databases()
        return _shared
