"""PostgreSQL LISTEN: one thread per coordinator receives notifications and sends announcements.

It holds a connection of its own LISTENing on the ``dbworker`` channel and hands each
payload to the router; what payloads mean is ``sql.notify``'s. Polling stays the fallback.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from dbworker import tuning
from dbworker.sql import notify
from dbworker.wakeups import connection, outbox


class Listener:
    """LISTENs on the channel and calls ``on_notify(payload)``; reconnects after errors.

    What was sent while it was away is lost: once listening again it calls ``on_resumed``
    (every loop looks, as at a wake-up naming no row).
    """

    def __init__(self, engine: Engine, on_notify: Callable[[str], None], *, secrets: tuple[str, ...],
                 on_resumed: Callable[[], None] | None = None) -> None:  # fmt: skip
        self._engine = engine
        self._on_notify = on_notify
        self._on_resumed = on_resumed
        self._listened = False  # a LISTEN succeeded before: the next one follows a gap
        self._secrets = secrets
        self._stop = threading.Event()
        self._announce = threading.Event()
        # Ended items to announce, by worker: their keys, or None for "some" (too many, or
        # keys without a text form).
        self._ended = outbox.EndedBatch()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.thread = threading.Thread(target=self._run, name="dbworker-listen", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def drain(self) -> None:
        """Nothing to do: items that end while the loops drain are still announced."""

    def stop(self, deadline: float) -> None:
        """Ask the thread to end; not waited for (it only receives and announces)."""
        self._stop.set()
        self._poke()

    def announce_done(self, worker: str, key: str | None = None) -> None:
        """Tell other coordinators an item of ``worker`` (``key`` as text) ended; batched while busy."""
        self._ended.add(worker, key)
        if not self._announce.is_set():
            self._announce.set()
            self._poke()

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # a wake-up is pending already, or we are closing

    def _run(self) -> None:
        connection.serve(self._engine, self._listen, stop=self._stop, what="notification listener",
                             secrets=self._secrets)  # fmt: skip
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _listen(self, conn: Any) -> None:
        conn.autocommit = True
        notify.listen(conn)
        if self._listened and self._on_resumed is not None:
            self._on_resumed()
        self._listened = True
        # Sleep in select() on the connection's socket and a self-pipe for announcements:
        # an idle coordinator costs no CPU here, and notifications act at once.
        own = conn.info.backend_pid
        while not self._stop.is_set():
            for note in conn.notifies(timeout=0.0):
                if note.pid != own:  # our own "done" was already acted on locally
                    self._on_notify(note.payload)
            if self._announce.is_set():
                self._announce.clear()
                ended = self._ended.take()
                try:
                    notify.announce_done(conn, ended)
                except Exception:
                    self._ended.put_back(ended)  # sent on the next connection
                    self._announce.set()
                    raise
                continue
            readable, _, _ = select.select([conn.fileno(), self._wake_r], [], [], tuning.LISTEN_IDLE_CHECK_SECONDS)
            if self._wake_r in readable:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
