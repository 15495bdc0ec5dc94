"""The handler processes of an async worker: a few processes, each running many items at once
as coroutines (``aiochild``), fed over a pipe; the same events and calls as ``pool.Pool``.

Items are handed to the live process with the most room, at once (no item waits behind
another, so nothing is pipelined or recalled). Ending one item is a cancel message: its
coroutine ends and the process reports it, its neighbours run on. Only a process that does
not answer in time (its loop blocked past the item's timeout) or a stop deadline is killed;
each item it held then gets its own ``Died`` event: the item that overran timed out, the
rest are given back (aborted), never counted against them.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from dbworker import aiochild, child, messages, spawning
from dbworker.backoff import Backoff
from dbworker.messages import Outcome
from dbworker.pool import Died, Done, Event, State, kill, poll, stop
from dbworker.sql import drivers
from dbworker.sql.items import Claim
from dbworker.tuning import (
    LOOP_BLOCKED_SECONDS,
    LOOP_KILL_GRACE_SECONDS,
    RESPAWN_FIRST_WAIT,
    RESPAWN_MAX_WAIT,
)

log = logging.getLogger("dbworker")


@dataclass(frozen=True)
class Health:
    """An async handler process's report: the worst lag of its event loop over the last
    second, and the items it runs now."""

    process: int
    lag_seconds: float
    in_flight: int


@dataclass
class Proc:
    index: int
    capacity: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    state: State = State.DEAD  # STARTING, IDLE (ready: takes items up to capacity) or DEAD
    claims: dict[str, Claim] = field(default_factory=dict)
    outbox: list[tuple[Any, str, str | None]] = field(default_factory=list)  # runs not yet sent (``flush``)
    since: dict[str, float] = field(default_factory=dict)  # when each started (monotonic)
    ended: dict[str, Outcome] = field(default_factory=dict)  # why the pool killed the process, per item
    lag: float = 0.0  # the worst event-loop lag of its last health report
    blocker: str | None = None  # the item whose coroutine held its loop, if it was late
    respawn_at: float = 0.0


def split(concurrency: int, processes: int) -> list[int]:
    """Items per process: ``concurrency`` spread over ``processes`` (the first ones take the rest)."""
    base, rest = divmod(concurrency, processes)
    return [base + (1 if i < rest else 0) for i in range(processes)]


class AsyncPool:
    """``processes`` async handler processes carrying up to ``concurrency`` items in all."""

    def __init__(self, config: child.ChildConfig, processes: int, *, concurrency: int,
                 timeout: float | None = None, handler: str = "") -> None:  # fmt: skip
        self._config = config
        self._timeout = timeout
        self._handler = handler
        self._procs = [Proc(i, n) for i, n in enumerate(split(concurrency, processes))]
        self._lock = threading.Lock()
        self._sending = threading.Lock()  # runs are sent before a cancel that follows them
        self._respawn = [Backoff(RESPAWN_FIRST_WAIT, RESPAWN_MAX_WAIT) for _ in self._procs]

    # --- views, safe from any thread -------------------------------------------------
    def open(self, *, pipelined: bool) -> int:
        """Room for items now, in live processes (``pipelined`` means nothing here)."""
        with self._lock:
            return sum(p.capacity - len(p.claims) for p in self._procs if p.state is State.IDLE and not p.ended)

    def busy_claims(self) -> list[Claim]:
        with self._lock:
            return [c for p in self._procs for c in p.claims.values()]

    held_claims = busy_claims  # every item handed over runs at once

    def pids(self) -> list[int]:
        with self._lock:
            return [p.process.pid for p in self._procs if p.process is not None and p.process.pid]

    def health(self) -> list[tuple[int, float, int]]:
        """(process index, worst loop lag of its last report, items in flight) per live process."""
        with self._lock:
            return [(p.index, p.lag, len(p.claims)) for p in self._procs if p.state is not State.DEAD]

    # --- lifecycle, from the worker's loop thread --------------------------------------
    def start(self) -> None:
        for proc in self._procs:
            self._spawn(proc)

    def _spawn(self, proc: Proc) -> None:
        parent_end, child_end = multiprocessing.Pipe(duplex=True)
        config = dataclasses.replace(self._config, capacity=proc.capacity)
        name, url = f"dbworker-{self._config.worker}-{proc.index}", drivers.async_url(config.database_url)
        process = spawning.start(aiochild.main, config, child_end, name, database_url=url)
        child_end.close()
        with self._lock:
            proc.process, proc.conn, proc.state, proc.lag, proc.blocker = process, parent_end, State.STARTING, 0.0, None
            proc.claims, proc.since, proc.ended, proc.outbox = {}, {}, {}, []

    def submit(self, claim: Claim, *, pipelined: bool) -> None:
        """Hand ``claim`` to the live process with the most room (``open()`` said there is);
        it is sent with the others of this dispatch at ``flush``."""
        with self._lock:
            ready = [p for p in self._procs if p.state is State.IDLE and not p.ended]
            proc = max(ready, key=lambda p: p.capacity - len(p.claims))
            assert len(proc.claims) < proc.capacity
            proc.claims[claim.token], proc.since[claim.token] = claim, time.monotonic()
            proc.outbox.append((claim.source_id, claim.token, claim.trace))

    def flush(self) -> None:
        """Send each process the runs handed to it since the last flush, in one message."""
        with self._sending:
            with self._lock:
                sends = [(p.conn, p.outbox) for p in self._procs if p.outbox and p.conn is not None]
                for p in self._procs:
                    p.outbox = []
            for conn, runs in sends:
                try:
                    conn.send((messages.RUNS, runs))
                except OSError:
                    pass  # it died just now; wait() reports the death with these claims

    def recall_long(self) -> float | None:
        return None  # nothing waits behind a running item

    def cancel_pending(self) -> None:
        pass  # nothing handed over waits to start

    def wait(self, timeout: float, extra: list[Any]) -> tuple[list[Event | Health], list[Any]]:
        """Wait up to ``timeout`` for results, deaths or any of ``extra``; return what happened."""
        now = time.monotonic()
        for proc in self._procs:
            if proc.state is State.DEAD and proc.respawn_at <= now:
                self._spawn(proc)
        with self._lock:
            live = [p for p in self._procs if p.state is not State.DEAD]
        waiting_respawn = [p.respawn_at - now for p in self._procs if p.state is State.DEAD]
        if waiting_respawn:
            timeout = max(0.0, min(timeout, *waiting_respawn))
        handles: list[Any] = list(extra)
        for p in live:
            assert p.conn is not None and p.process is not None
            handles += [p.conn, p.process.sentinel]
        ready = wait(handles, timeout)
        events: list[Event | Health] = []
        for p in live:
            assert p.conn is not None and p.process is not None
            while p.conn in ready and poll(p.conn):
                try:
                    message = p.conn.recv()
                except (EOFError, OSError):
                    break
                events += self._on_message(p, message)
            if p.process.sentinel in ready or not p.process.is_alive():
                events += self._on_death(p)
        return events, [h for h in ready if h in extra]

    def _on_message(self, proc: Proc, message: tuple[Any, ...]) -> list[Event | Health]:
        if message[0] == messages.READY:
            with self._lock:
                proc.state = State.IDLE
            self._respawn[proc.index].reset()
            return []
        if message[0] == messages.HEALTH:
            _, lag, in_flight, token = message
            with self._lock:
                proc.lag, proc.blocker = float(lag), token
                item = proc.claims.get(token) if token is not None else None
            if lag >= LOOP_BLOCKED_SECONDS:
                what = "" if item is None else f" running item {item.source_id!r}"
                log.warning("dbworker worker %s: handler %s%s blocked the event loop of handler process %d for "
                            "%.2f s (%d items in flight waited): a blocking call inside `async def`? Await it, "
                            "or run it with asyncio.to_thread()", self._config.worker, self._handler, what,
                            proc.index, lag, in_flight)  # fmt: skip
            return [Health(proc.index, float(lag), int(in_flight))]
        reports: list[messages.Report] = message[1] if message[0] == messages.DONES else [message[1]]
        with self._lock:
            done: list[Event | Health] = [Done(proc.claims.pop(r.token), r) for r in reports]
            for r in reports:
                proc.since.pop(r.token, None)
        return done

    def _on_death(self, proc: Proc) -> list[Event]:
        assert proc.process is not None and proc.conn is not None
        proc.process.join(timeout=5)
        code = proc.process.exitcode
        with self._lock:
            before_ready = proc.state is State.STARTING
            died: list[Event] = [
                Died(c, code, proc.ended.get(t), before_ready, since=proc.since.get(t)) for t, c in proc.claims.items()
            ] or [Died(None, code, None, before_ready)]
            proc.state, proc.claims, proc.since, proc.ended = State.DEAD, {}, {}, {}
            proc.respawn_at = time.monotonic() + (self._respawn[proc.index].next() if before_ready else 0.0)
        proc.conn.close()
        return died

    def _kill(self, proc: Proc, reasons: dict[str, Outcome], rest: Outcome) -> BaseProcess | None:
        """Under the lock: mark why each held item ends with the process (``rest``: those not named)."""
        proc.ended = {t: reasons.get(t, rest) for t in proc.claims}
        return proc.process

    def end_overdue(self) -> float | None:
        """Kill processes holding an item past its timeout plus a grace: their loop did not
        run to cancel it (a coroutine blocks it). That item timed out; the others are given back."""
        if self._timeout is None:
            return None
        limit = self._timeout + LOOP_KILL_GRACE_SECONDS
        now = time.monotonic()
        due: list[float] = []
        killed: list[BaseProcess | None] = []
        with self._lock:
            for p in self._procs:
                if p.ended:
                    continue
                late = {t: Outcome.TIMED_OUT for t, s in p.since.items() if now - s >= limit}
                if p.blocker in late:  # the others only waited behind it: given back
                    late = {p.blocker: Outcome.TIMED_OUT}
                if late:
                    killed.append(self._kill(p, late, Outcome.ABORTED))
                else:
                    due += [s + limit - now for s in p.since.values()]
        for process in killed:
            if process is not None:
                log.warning("dbworker worker %s: handler %s did not end %g s past its timeout: its event loop is "
                            "blocked; replacing its handler process", self._config.worker, self._handler,
                            LOOP_KILL_GRACE_SECONDS)  # fmt: skip
                process.kill()
        return min(due) if due else None

    def end_claims(self, tokens: set[str], reason: Outcome) -> int:
        """Cancel the coroutines of these claims (lost); each process reports them ended."""
        self.flush()
        with self._sending:
            sends: list[tuple[Connection, str]] = []
            with self._lock:
                for p in self._procs:
                    if p.conn is not None and p.state is not State.DEAD:
                        sends += [(p.conn, t) for t in p.claims if t in tokens]
            for conn, token in sends:
                try:
                    conn.send(messages.cancel(token))
                except OSError:
                    pass  # it died: wait() reports the death with the claim
        return len(sends)

    def end_busy(self, reason: Outcome) -> int:
        """Kill every process holding items now (a stop deadline); the deaths arrive through ``wait``."""
        with self._lock:
            busy = [(p, self._kill(p, {}, reason)) for p in self._procs if p.claims]
        for _, process in busy:
            if process is not None:
                process.kill()
        return sum(len(p.ended) for p, _ in busy)

    def kill_all(self) -> None:
        """Kill every process of the pool now (any thread): the last resort of a stop."""
        with self._lock:
            processes = [p.process for p in self._procs if p.process is not None]
        kill(processes)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Tell processes to exit, wait up to ``timeout``, kill what remains."""
        with self._lock:
            procs, self._procs = list(self._procs), []
        stop(procs, timeout)
