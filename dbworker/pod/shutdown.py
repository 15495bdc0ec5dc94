"""SIGTERM and SIGINT for the ``dbworker run`` process: drain on the first, abort on the second.

The first signal stops claiming and calls ``coordinator.stop(timeout=drain)`` in a thread
(handlers still running at the deadline are ended and their claims released); a second
signal calls ``coordinator.abort()``. The coordinator does the work; this module only
decides when. The main thread waits in ``wait()`` so signal handlers can run there.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from dbworker import redact

log = logging.getLogger("dbworker.signals")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# After an abort the coordinator ends everything at once; if it still has not returned
# after this long, give up waiting so the process exits and Kubernetes sees it.
ABORT_WAIT_SECONDS = 15.0


class Stoppable(Protocol):
    def stop(self, timeout: float | None = None) -> None: ...

    def abort(self) -> None: ...


class Shutdown:
    """Turns signals into one drain, then one abort; ``wait()`` returns when it is over."""

    def __init__(
        self, *, drain_seconds: float, on_request: Callable[[], None] | None = None
    ) -> None:
        self.drain_seconds = drain_seconds
        self._on_request = on_request
        # Reentrant: a signal handler runs on the main thread, possibly while it holds this.
        self.lock = threading.RLock()
        self._coordinator: Stoppable | None = None
        self._signals = 0
        self._drain_thread: threading.Thread | None = None
        self._aborted_at: float | None = None
        self.requested = threading.Event()  # a stop was asked for
        self.done = threading.Event()  # the coordinator stopped (or was never started)
        self.error: BaseException | None = None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (call from the main thread)."""
        for sig in SIGNALS:
            signal.signal(sig, self.handle)

    def attach(self, coordinator: Stoppable) -> None:
        """The started coordinator to stop; a signal that came before is acted on now."""
        with self.lock:
            self._coordinator = coordinator
            if self.requested.is_set():
                self._begin_drain()

    def request(self, signum: int | None = None) -> None:
        """What a signal does; also callable directly (tests, embedding)."""
        with self.lock:
            self._signals += 1
            first = self._signals == 1
        name = signal.Signals(signum).name if signum else "stop request"
        if first:
            log.info("%s: stop claiming, drain up to %ss", name, _fmt(self.drain_seconds))
            self.requested.set()
            if self._on_request is not None:
                self._on_request()
            with self.lock:
                if self._coordinator is not None:
                    self._begin_drain()
        else:
            log.warning("%s again: ending running handlers and releasing their claims now", name)
            with self.lock:
                coordinator = self._coordinator
            if coordinator is not None:
                threading.Thread(
                    target=self._abort, args=(coordinator,), name="dbworker-abort", daemon=True
                ).start()

    def wait(self) -> None:
        """Block the main thread until the drain is over; signals keep being handled."""
        while not self.done.wait(0.2):
            if (
                self._aborted_at is not None
                and time.monotonic() - self._aborted_at > ABORT_WAIT_SECONDS
            ):
                log.error("coordinator did not stop %ss after abort; exiting", ABORT_WAIT_SECONDS)
                return

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signum)

    def _begin_drain(self) -> None:
        # Called with the lock held; at most one drain thread.
        if self._drain_thread is not None:
            return
        coordinator = self._coordinator
        assert coordinator is not None
        self._drain_thread = threading.Thread(
            target=self._drain, args=(coordinator,), name="dbworker-drain", daemon=True
        )
        self._drain_thread.start()

    def _drain(self, coordinator: Stoppable) -> None:
        try:
            coordinator.stop(timeout=self.drain_seconds)
        except BaseException as exc:  # reported by the exit code
            self.error = exc
            log.error("stopping failed: %s", redact.redact(f"{type(exc).__name__}: {exc}"))
        finally:
            self.done.set()

    def _abort(self, coordinator: Stoppable) -> None:
        self._aborted_at = time.monotonic()
        try:
            coordinator.abort()
        except BaseException as exc:
            self.error = exc
            log.error("abort failed: %s", redact.redact(f"{type(exc).__name__}: {exc}"))


def _fmt(seconds: float) -> str:
    return f"{seconds:g}"
