"""The handler process pool of one worker: spawn, hand out items, replace the dead, end at a deadline.

Each slot is one long-lived child process (``child.main``) fed items over a pipe: one
running and, for short handlers, one more already handed over ("pending"), so the process
starts its next item without waiting for the coordinator. A pending item is taken back
(the process answers "skipped") on a stop, or when the item ahead of it runs longer than
``recall_after`` seconds, so no item waits behind a long one. The pool only moves
processes and messages (the pipe protocol is ``messages``'); what an outcome means for
the database is the loop's business. Slots that die are replaced; a slot that keeps dying
before it is ready is respawned with a growing delay so a broken application cannot spin
the CPU.
"""

from __future__ import annotations

import enum
import multiprocessing
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from dbworker import child, messages, spawning
from dbworker.backoff import Backoff
from dbworker.messages import Outcome
from dbworker.sql.items import Claim
from dbworker.tuning import RESPAWN_FIRST_WAIT, RESPAWN_MAX_WAIT


class State(enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DEAD = "dead"


@dataclass
class Slot:
    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    state: State = State.DEAD
    claim: Claim | None = None  # the item the process runs (or starts next, if none runs)
    pending: Claim | None = None  # handed over behind ``claim``, not started
    cancelled: str | None = None  # token of the last claim a cancel was sent for
    since: float = 0.0  # when ``claim`` became the item the process runs (monotonic)
    # Why the pool itself ended the process (one of messages.ENDED_BY_POOL): aborted (a drain
    # deadline: give the claim back), timed_out (a failed attempt), lost (nothing to record).
    ended: Outcome | None = None
    ending: str | None = None  # token of the item ``ended`` was meant for (see _on_message)
    respawn_at: float = 0.0


def skip_of(claim: Claim | None, pending: Claim | None, token: str) -> tuple[Claim | None, Claim | None, Claim | None]:
    """What a process's "skipped" for ``token`` leaves of a slot's ``claim`` (runs, or starts
    next) and ``pending`` (handed over behind it): (the skipped claim, claim, pending).

    The skip is for the pending item; or, when the result of the item ahead of it came first
    (the pending one then became ``claim``, though it never started), for ``claim``: an item
    handed over behind that one since is what the process runs next.
    """
    if pending is not None and pending.token == token:
        return pending, claim, None
    return claim, pending, None


@dataclass(frozen=True)
class Done:
    claim: Claim
    report: messages.Report


@dataclass(frozen=True)
class Skipped:
    """A handed-over item the process was told not to start (a stop, or a recall); it never ran."""

    claim: Claim


@dataclass(frozen=True)
class Died:
    claim: Claim | None  # the item it was running, if any
    exitcode: int | None
    ended: Outcome | None  # set when the pool ended it on purpose
    before_ready: bool
    pending: Claim | None = None  # handed over behind ``claim``, never started
    since: float | None = None  # when ``claim`` started (monotonic), for its history


Event = Done | Skipped | Died


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, in words: exit code or signal."""
    if exitcode is None:
        return "ended for an unknown reason"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory, or killed)" if -exitcode == signal.SIGKILL else ""
        return f"killed by {name} ({-exitcode}){hint}"
    return f"exited with code {exitcode}"


class Pool:
    """``size`` handler processes for one worker."""

    def __init__(self, config: child.ChildConfig, size: int, *, recall_after: float = 0.5,
                 timeout: float | None = None) -> None:  # fmt: skip
        self._config = config
        self._recall_after = recall_after
        self._timeout = timeout
        self._slots = [Slot(i) for i in range(size)]
        self._lock = threading.Lock()
        self._respawn = [Backoff(RESPAWN_FIRST_WAIT, RESPAWN_MAX_WAIT) for _ in range(size)]

    # --- views, safe from any thread -------------------------------------------------
    def idle(self) -> int:
        with self._lock:
            return sum(1 for s in self._slots if s.state is State.IDLE)

    def _can_queue(self, s: Slot, now: float) -> bool:
        # Behind a busy process with nothing pending, whose item has not run long.
        return (
            s.state is State.BUSY and s.pending is None and s.ended is None
            and now - s.since < self._recall_after
        )

    def open(self, *, pipelined: bool) -> int:
        """Slots that can take an item now: idle ones, and with ``pipelined`` busy ones (``_can_queue``)."""
        now = time.monotonic()
        with self._lock:
            return sum(
                1 for s in self._slots
                if s.state is State.IDLE or (pipelined and self._can_queue(s, now))
            )

    def busy_claims(self) -> list[Claim]:
        """Claims of the items the processes run (or are about to start)."""
        with self._lock:
            return [s.claim for s in self._slots if s.state is State.BUSY and s.claim is not None]

    def held_claims(self) -> list[Claim]:
        """Every claim handed to a process: running and pending (their leases must be kept)."""
        with self._lock:
            busy = [s for s in self._slots if s.state is State.BUSY]
            return [c for s in busy for c in (s.claim, s.pending) if c is not None]

    def pids(self) -> list[int]:
        with self._lock:
            return [s.process.pid for s in self._slots if s.process is not None and s.process.pid]

    # --- lifecycle, from the worker's loop thread --------------------------------------
    def start(self) -> None:
        for slot in self._slots:
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        name = f"dbworker-{self._config.worker}-{slot.index}"
        process = spawning.start(child.main, self._config, child_end, name, database_url=self._config.database_url)
        child_end.close()
        with self._lock:
            slot.process, slot.conn = process, parent_end
            slot.state, slot.claim, slot.pending, slot.ended, slot.ending = State.STARTING, None, None, None, None
            slot.cancelled = None

    def submit(self, claim: Claim, *, pipelined: bool) -> None:
        """Hand ``claim`` to an idle slot, else (``pipelined``) behind a busy one; see ``open()``."""
        now = time.monotonic()
        with self._lock:
            slot = next((s for s in self._slots if s.state is State.IDLE), None)
            if slot is not None:
                slot.state, slot.claim, slot.since = State.BUSY, claim, now
            else:
                assert pipelined
                slot = next(s for s in self._slots if self._can_queue(s, now))
                slot.pending = claim
            conn = slot.conn
        assert conn is not None
        try:
            conn.send(messages.run(claim.source_id, claim.token, claim.trace))
        except OSError:
            pass  # it died just now; wait() reports the death with this claim

    def flush(self) -> None:
        """Nothing to send: ``submit`` sent each item at once."""

    def recall_long(self) -> float | None:
        """Take back items pending behind one running longer than ``recall_after``.

        Returns the seconds until the next such recall may be due (None: nothing pending).
        """
        now = time.monotonic()
        sends: list[tuple[Connection, str]] = []
        due: list[float] = []
        with self._lock:
            for s in self._slots:
                if s.state is not State.BUSY or s.pending is None or s.cancelled == s.pending.token:
                    continue
                left = s.since + self._recall_after - now
                if left > 0:
                    due.append(left)
                else:
                    self._cancel_once(s, s.pending.token, sends)
        self._send_cancels(sends)
        return min(due) if due else None

    @staticmethod
    def _cancel_once(s: Slot, token: str, sends: list[tuple[Connection, str]]) -> None:
        # Under the lock: one cancel per handed-over claim, sent after the lock is released.
        if s.cancelled != token and s.conn is not None:
            s.cancelled = token
            sends.append((s.conn, token))

    def _send_cancels(self, sends: list[tuple[Connection, str]]) -> None:
        for conn, token in sends:
            try:
                conn.send(messages.cancel(token))
            except OSError:
                pass  # it died: wait() reports the death with the pending claim

    def cancel_pending(self) -> None:
        """Ask every busy process not to start the item handed to it last, if it has not yet.

        Each answers with a skip (never started: give it back) or, too late, runs it as usual.
        """
        sends: list[tuple[Connection, str]] = []
        with self._lock:
            for s in self._slots:
                last = s.pending or s.claim
                if s.state is State.BUSY and last is not None:
                    self._cancel_once(s, last.token, sends)
        self._send_cancels(sends)

    def wait(self, timeout: float, extra: list[Any]) -> tuple[list[Event], list[Any]]:
        """Wait up to ``timeout`` for results, deaths or any of ``extra``; return what happened."""
        now = time.monotonic()
        for slot in self._slots:
            if slot.state is State.DEAD and slot.respawn_at <= now:
                self._spawn(slot)
        with self._lock:
            live = [s for s in self._slots if s.state is not State.DEAD]
        waiting_respawn = [s.respawn_at - now for s in self._slots if s.state is State.DEAD]
        if waiting_respawn:
            timeout = max(0.0, min(timeout, *waiting_respawn))
        handles: list[Any] = list(extra)
        for s in live:
            assert s.conn is not None and s.process is not None
            handles += [s.conn, s.process.sentinel]
        ready = wait(handles, timeout)
        events: list[Event] = []
        for s in live:
            assert s.conn is not None and s.process is not None
            # Messages first: a process that reported and then died still reported.
            while s.conn in ready and poll(s.conn):
                try:
                    message = s.conn.recv()
                except (EOFError, OSError):
                    break
                events += self._on_message(s, message)
            if s.process.sentinel in ready or not s.process.is_alive():
                events.append(self._on_death(s))
        return events, [h for h in ready if h in extra]

    def _on_message(self, slot: Slot, message: tuple[Any, ...]) -> list[Event]:
        if message[0] == messages.READY:
            with self._lock:
                slot.state = State.IDLE
            self._respawn[slot.index].reset()
            return []
        if message[0] == messages.SKIPPED:  # maybe before the result of the item ahead of it
            with self._lock:
                skipped, claim, slot.pending = skip_of(slot.claim, slot.pending, message[1])
                if claim is not slot.claim:
                    slot.claim, slot.since = claim, time.monotonic()
                if claim is None:
                    slot.state = State.IDLE
            assert skipped is not None and skipped.token == message[1]
            return [Skipped(skipped)]
        with self._lock:
            claim = slot.claim
            slot.claim, slot.pending, slot.since = slot.pending, None, time.monotonic()
            slot.state = State.BUSY if slot.claim is not None else State.IDLE
            if slot.ended is not None and slot.claim is not None and slot.ending != slot.claim.token:
                # The item the process was ended for had already finished: the kill meets the
                # one that started behind it, which did nothing wrong. It is given back.
                slot.ended = Outcome.ABORTED
        report: messages.Report = message[1]
        assert claim is not None and claim.token == report.token
        return [Done(claim, report)]

    def _on_death(self, slot: Slot) -> Died:
        assert slot.process is not None and slot.conn is not None
        slot.process.join(timeout=5)
        with self._lock:
            before_ready = slot.state is State.STARTING
            died = Died(slot.claim, slot.process.exitcode, slot.ended, before_ready, slot.pending, slot.since)
            slot.state, slot.claim, slot.pending = State.DEAD, None, None
            slot.respawn_at = time.monotonic() + (self._respawn[slot.index].next() if before_ready else 0.0)
        slot.conn.close()
        return died

    def end_overdue(self) -> float | None:
        """End processes whose item has run longer than the timeout (any thread).

        Returns the seconds until the next such deadline (None: no timeout, or nothing runs).
        The process is killed, so a handler that never returns or ignores signals ends too;
        its transaction dies with its connection. The death arrives through ``wait``.
        """
        if self._timeout is None:
            return None
        now = time.monotonic()
        due: list[float] = []
        overdue: list[BaseProcess] = []
        with self._lock:
            for s in self._slots:
                if s.state is not State.BUSY or s.claim is None or s.ended is not None:
                    continue
                left = s.since + self._timeout - now
                if left > 0:
                    due.append(left)
                elif s.process is not None:
                    s.ended, s.ending = Outcome.TIMED_OUT, s.claim.token
                    overdue.append(s.process)
        for process in overdue:
            process.kill()
        return min(due) if due else None

    def end_claims(self, tokens: set[str], reason: Outcome) -> int:
        """End the processes running the claims with these tokens (any thread); return how many.

        A listed claim handed over behind a running one is taken back instead (``skipped``).
        """
        sends: list[tuple[Connection, str]] = []
        ended: list[BaseProcess] = []
        with self._lock:
            for s in self._slots:
                if s.state is not State.BUSY:
                    continue
                if s.claim is not None and s.claim.token in tokens and s.ended is None and s.process is not None:
                    s.ended, s.ending = reason, s.claim.token
                    ended.append(s.process)
                elif s.pending is not None and s.pending.token in tokens:
                    self._cancel_once(s, s.pending.token, sends)
        self._send_cancels(sends)
        for process in ended:
            process.kill()
        return len(ended)

    def end_busy(self, reason: Outcome) -> int:
        """Kill every busy slot's process now (any thread); the deaths arrive through ``wait``."""
        with self._lock:
            busy = [s for s in self._slots if s.state is State.BUSY]
            for s in busy:
                s.ended = reason
        for s in busy:
            if s.process is not None:
                s.process.kill()
        return len(busy)

    def kill_all(self) -> None:
        """Kill every process of the pool now (any thread): the last resort of a stop."""
        with self._lock:
            processes = [s.process for s in self._slots if s.process is not None]
        kill(processes)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Tell idle processes to exit, wait up to ``timeout``, kill what remains."""
        with self._lock:
            slots, self._slots = list(self._slots), []
        stop(slots, timeout)


class Handle(Protocol):
    """What ``stop`` needs of a handler process's record (a ``Slot``, an async pool's ``Proc``)."""

    process: BaseProcess | None
    conn: Connection | None
    state: State


def kill(processes: list[BaseProcess]) -> None:
    """Kill ``processes`` now and reap them."""
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=5)


def stop(handles: Sequence[Handle], timeout: float) -> None:
    """Tell each process of ``handles`` to exit, wait up to ``timeout`` in all, kill what remains,
    close the pipes."""
    for h in handles:
        if h.conn is not None and h.state is not State.DEAD:
            try:
                h.conn.send(messages.STOP)
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    for h in handles:
        if h.process is None:
            continue
        h.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if h.process.is_alive():
            h.process.kill()
            h.process.join(timeout=5)
        if h.conn is not None:
            h.conn.close()


def poll(conn: Connection) -> bool:
    """Whether ``conn`` has a message; False once the other end is gone."""
    try:
        return conn.poll()
    except (EOFError, OSError):
        return False
