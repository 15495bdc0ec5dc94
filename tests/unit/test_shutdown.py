"""Unit tests of dbworker.pod.shutdown: first request drains, a second aborts (no real signals)."""

from __future__ import annotations

import signal
import threading

from dbworker.pod import shutdown
from tests.helpers import wait_until


class FakeCoordinator:
    def __init__(self) -> None:
        self.stop_timeouts: list[float | None] = []
        self.aborted = threading.Event()
        self.release = threading.Event()

    def stop(self, timeout: float | None = None) -> None:
        self.stop_timeouts.append(timeout)
        # Like a real drain: wait for handlers, unless aborted.
        while not (self.release.is_set() or self.aborted.is_set()):
            self.release.wait(0.01)

    def abort(self) -> None:
        self.aborted.set()


def test_first_request_drains_with_the_deadline_and_wait_returns() -> None:
    seen: list[str] = []
    s = shutdown.Shutdown(drain_seconds=7.5, on_request=lambda: seen.append("requested"))
    c = FakeCoordinator()
    s.attach(c)
    s.request(signal.SIGTERM)
    assert seen == ["requested"] and s.requested.is_set()
    wait_until(lambda: c.stop_timeouts == [7.5], timeout=10, what="stop(timeout=7.5)")
    assert not s.done.is_set()
    c.release.set()
    s.wait()
    assert s.done.is_set() and s.error is None and not c.aborted.is_set()


def test_second_request_aborts() -> None:
    s = shutdown.Shutdown(drain_seconds=600)
    c = FakeCoordinator()
    s.attach(c)
    s.request(signal.SIGTERM)
    s.request(signal.SIGINT)
    s.wait()
    assert c.aborted.is_set() and c.stop_timeouts == [600]


def test_request_before_attach_drains_on_attach() -> None:
    s = shutdown.Shutdown(drain_seconds=1)
    s.request(signal.SIGTERM)
    c = FakeCoordinator()
    c.release.set()
    s.attach(c)
    s.wait()
    assert c.stop_timeouts == [1]


def test_failing_stop_is_reported() -> None:
    class Broken(FakeCoordinator):
        def stop(self, timeout: float | None = None) -> None:
            raise RuntimeError("postgresql://u:pw@h/db gone")

    s = shutdown.Shutdown(drain_seconds=1)
    s.attach(Broken())
    s.request(None)
    s.wait()
    assert isinstance(s.error, RuntimeError)


def test_install_handles_sigterm_and_sigint() -> None:
    before = {sig: signal.getsignal(sig) for sig in shutdown.SIGNALS}
    try:
        s = shutdown.Shutdown(drain_seconds=1)
        s.install()
        for sig in shutdown.SIGNALS:
            assert signal.getsignal(sig) == s.handle
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_signal_while_the_main_thread_holds_the_lock_does_not_deadlock() -> None:
    # The handler runs on the main thread between two bytecodes, maybe inside attach().
    s = shutdown.Shutdown(drain_seconds=1)
    c = FakeCoordinator()
    c.release.set()
    with s.lock:
        s.request(signal.SIGTERM)
        s.attach(c)
    s.wait()
    assert c.stop_timeouts == [1]
