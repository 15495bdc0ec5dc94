"""Liveness and readiness of a worker process, as pure functions of loop heartbeats.

``liveness()`` and ``readiness()`` decide from a ``Snapshot``; ``HealthTracker`` is the
observer that records heartbeats, ended loops and draining to produce one, and asks the
coordinator which of its threads (loops, lease keeper) are no longer running, whatever ended
them: a thread killed by an error that never reached an observer still turns health red.
Serving the verdicts is ``httpserver``'s job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from dbworker import observe


@dataclass(frozen=True)
class Verdict:
    """``ok`` and a one-line reason a human can act on."""

    ok: bool
    reason: str


@dataclass(frozen=True)
class Snapshot:
    """What the process knows about its loops at one moment."""

    workers: tuple[str, ...] = ()
    started_at: float | None = None  # Unix time the coordinator started; None before
    heartbeats: Mapping[str, float] = field(default_factory=dict)  # worker -> last round trip
    ended: frozenset[str] = frozenset()  # loops whose thread has ended
    draining: bool = False
    dead_threads: tuple[str, ...] = ()  # the coordinator's threads found not running (their names)


def liveness_bound(*, lease_seconds: float, max_poll_seconds: float) -> float:
    """Seconds without a database round trip after which a loop counts as stuck.

    An idle loop polls at least every ``max_poll_seconds``; a busy one renews leases every
    third of a lease. Allow three idle polls or a whole lease, plus one poll of slack, so a
    brief database restart does not get the pod killed but a dead database does.
    """
    return max(lease_seconds, 3 * max_poll_seconds) + max_poll_seconds


def liveness(snapshot: Snapshot, *, now: float, bound: float) -> Verdict:
    """Green while every loop is running and made a database round trip within ``bound``.

    A loop that ended while not draining is red: only a restart brings it back. Before the
    coordinator starts (imports, migrations) the process counts as alive.
    """
    if snapshot.started_at is None:
        return Verdict(True, "starting")
    if snapshot.draining:
        # Loops end on purpose while draining; a restart now would only cut handlers short.
        return Verdict(True, "draining")
    problems: list[str] = [f"{thread} is no longer running" for thread in snapshot.dead_threads]
    for worker in snapshot.workers:
        if worker in snapshot.ended:
            problems.append(f"loop of worker {worker!r} ended")
            continue
        last = snapshot.heartbeats.get(worker)
        if last is None:
            if now - snapshot.started_at > bound:
                problems.append(
                    f"worker {worker!r} made no database round trip in "
                    f"{now - snapshot.started_at:.0f}s since start (bound {bound:.0f}s)"
                )
        elif now - last > bound:
            problems.append(
                f"worker {worker!r} made no database round trip for {now - last:.0f}s "
                f"(bound {bound:.0f}s)"
            )
    if problems:
        return Verdict(False, "; ".join(problems))
    return Verdict(True, "ok")


def readiness(snapshot: Snapshot) -> Verdict:
    """Green once started and every loop has reached the database; red while draining."""
    if snapshot.started_at is None:
        return Verdict(False, "not started")
    if snapshot.draining:
        return Verdict(False, "draining")
    if snapshot.dead_threads:
        return Verdict(False, "not running: " + ", ".join(snapshot.dead_threads))
    ended = [w for w in snapshot.workers if w in snapshot.ended]
    if ended:
        return Verdict(False, "loop ended: " + ", ".join(ended))
    waiting = [w for w in snapshot.workers if w not in snapshot.heartbeats]
    if waiting:
        return Verdict(False, "no database round trip yet: " + ", ".join(waiting))
    return Verdict(True, "ok")


class HealthTracker(observe.Observer):
    """Records the events health depends on; ``snapshot()`` freezes them for the rules."""

    def __init__(self, dead_threads: Callable[[], Iterable[str]] | None = None) -> None:
        """``dead_threads``: the coordinator's ``dead_threads`` (names of its threads that
        ended while it runs), read at every snapshot."""
        self._dead_threads = dead_threads
        self._lock = threading.Lock()
        self._workers: tuple[str, ...] = ()
        self._started_at: float | None = None
        self._heartbeats: dict[str, float] = {}
        self._ended: set[str] = set()
        self._draining = False

    def started(self, workers: Iterable[str], *, at: float | None = None) -> None:
        """The coordinator runs ``workers`` from now on."""
        with self._lock:
            self._workers = tuple(workers)
            self._started_at = time.time() if at is None else at

    def coordinator_started(self, *, dialect: str, slots: dict[str, int]) -> None:
        with self._lock:
            if self._started_at is None:
                self._workers = tuple(slots)
                self._started_at = time.time()

    def heartbeat(self, worker: str, *, timestamp: float) -> None:
        with self._lock:
            self._heartbeats[worker] = timestamp

    def loop_ended(self, worker: str) -> None:
        with self._lock:
            self._ended.add(worker)

    def draining(self, *, draining: bool) -> None:
        with self._lock:
            self._draining = draining

    def snapshot(self) -> Snapshot:
        dead = tuple(self._dead_threads()) if self._dead_threads is not None else ()
        with self._lock:
            return Snapshot(
                workers=self._workers,
                started_at=self._started_at,
                heartbeats=dict(self._heartbeats),
                ended=frozenset(self._ended),
                draining=self._draining,
                dead_threads=dead,
            )
