"""Events the claim loop, pool and lease keeper report, for metrics, health and tests.

An observer receives plain calls from the coordinator's threads; it must be quick and
thread-safe. The library itself never depends on what an observer does with them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from dbworker import messages

# Execution outcomes as reported to observers (and used as metric label values).
OUTCOMES = messages.OUTCOMES
# Database operations whose errors are reported.
OPERATIONS = ("claim", "renew", "complete", "backlog", "prune")
# Lease renewal results.
RENEWAL_RESULTS = ("renewed", "lost", "error")
# Why a wake-up notification was ignored (see wakeups.router).
IGNORED_REASONS = ("malformed", "foreign")


class Observer:
    """Base observer: every hook is a no-op; override what you need."""

    def coordinator_started(self, *, dialect: str, slots: dict[str, int]) -> None:
        """The coordinator started these workers with these slot counts."""

    def claimed(self, worker: str, *, count: int, taken_over: int, seconds: float) -> None:
        """One claim round trip took ``seconds`` and claimed ``count`` items (maybe 0)."""

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        """An execution ended with ``outcome`` (one of OUTCOMES) after ``seconds`` in the handler."""

    def active(self, worker: str, *, running: int) -> None:
        """The number of handlers running for ``worker`` changed."""

    def renewed(self, worker: str, *, result: str, count: int) -> None:
        """``count`` lease renewals ended with ``result`` (one of RENEWAL_RESULTS)."""

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        """A database operation (one of OPERATIONS) failed; the loop goes on."""

    def heartbeat(self, worker: str, *, timestamp: float) -> None:
        """``worker``'s loop completed a database round trip at ``timestamp`` (Unix time)."""

    def loop_ended(self, worker: str) -> None:
        """``worker``'s loop thread ended (after stop, or by an unexpected error)."""

    def loop_health(self, worker: str, *, process: int, lag_seconds: float, in_flight: int) -> None:
        """An async handler process (``process``: its index) reported the worst lag of its
        event loop over the last second and the items it runs now."""

    def draining(self, *, draining: bool) -> None:
        """The coordinator stopped claiming and is waiting for running handlers."""

    def paused(self, worker: str, *, paused: bool) -> None:
        """``worker`` was found paused (or resumed) fleet-wide: its loop stopped (or resumed) claiming."""

    def notification_ignored(self, *, reason: str) -> None:
        """A wake-up notification was ignored (``reason``: one of IGNORED_REASONS)."""


class Observers(Observer):
    """Fans every event out to the registered observers; one failing observer harms none."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self._observers: list[Observer] = list(observers)
        self._lock = threading.Lock()

    def add(self, observer: Observer) -> None:
        with self._lock:
            self._observers.append(observer)

    def _each(self) -> list[Observer]:
        with self._lock:
            return list(self._observers)

    def coordinator_started(self, *, dialect: str, slots: dict[str, int]) -> None:
        for o in self._each():
            _safely(o.coordinator_started, dialect=dialect, slots=slots)

    def claimed(self, worker: str, *, count: int, taken_over: int, seconds: float) -> None:
        for o in self._each():
            _safely(o.claimed, worker, count=count, taken_over=taken_over, seconds=seconds)

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        for o in self._each():
            _safely(o.executed, worker, outcome=outcome, seconds=seconds)

    def active(self, worker: str, *, running: int) -> None:
        for o in self._each():
            _safely(o.active, worker, running=running)

    def renewed(self, worker: str, *, result: str, count: int) -> None:
        for o in self._each():
            _safely(o.renewed, worker, result=result, count=count)

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        for o in self._each():
            _safely(o.db_error, worker, operation=operation, error=error)

    def heartbeat(self, worker: str, *, timestamp: float) -> None:
        for o in self._each():
            _safely(o.heartbeat, worker, timestamp=timestamp)

    def loop_ended(self, worker: str) -> None:
        for o in self._each():
            _safely(o.loop_ended, worker)

    def loop_health(self, worker: str, *, process: int, lag_seconds: float, in_flight: int) -> None:
        for o in self._each():
            _safely(o.loop_health, worker, process=process, lag_seconds=lag_seconds, in_flight=in_flight)

    def draining(self, *, draining: bool) -> None:
        for o in self._each():
            _safely(o.draining, draining=draining)

    def paused(self, worker: str, *, paused: bool) -> None:
        for o in self._each():
            _safely(o.paused, worker, paused=paused)

    def notification_ignored(self, *, reason: str) -> None:
        for o in self._each():
            _safely(o.notification_ignored, reason=reason)


def _safely(fn: object, *args: object, **kwargs: object) -> None:
    # An observer bug must never stop a worker loop.
    try:
        fn(*args, **kwargs)  # type: ignore[operator]
    except Exception:
        import logging

        logging.getLogger("dbworker").exception("observer %r failed", fn)
