"""One claim loop per worker: wait, pick, fetch, run, record (the parts are ``engine``'s).

The loop owns its pool. It never ends because of the database: every error is logged,
reported and retried with backoff, and claiming resumes by itself when the server is back.
It claims only while it has idle handler processes, waits ``poll_seconds`` (doubling to
``max_poll_seconds``) after finding nothing, and claims again at once when an item ends.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from dbworker import child, tracing
from dbworker.aiopool import AsyncPool
from dbworker.backoff import Backoff
from dbworker.engine import spans as item_spans
from dbworker.engine.context import Context
from dbworker.engine.fetch import Fetcher
from dbworker.engine.picker import Picker
from dbworker.engine.pruner import Pruner
from dbworker.engine.recorder import Recorder
from dbworker.engine.runner import Runner
from dbworker.messages import Outcome
from dbworker.observe import Observer
from dbworker.pool import Pool
from dbworker.settings import Settings
from dbworker.sql import items, poolers, tables
from dbworker.sweep import Sweep
from dbworker.tuning import (
    ERROR_FIRST_WAIT,
    ERROR_MAX_WAIT,
    LOCKED_ROWS_FIRST_WAIT,
    LOCKED_ROWS_MAX_WAIT,
    LOOKUP_SECONDS,
)
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")



class Waker:
    """A self-pipe that interrupts the loop's wait from any thread."""

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)

    def fileno(self) -> int:
        return self._r.fileno()

    def wake(self) -> None:
        try:
            self._w.send(b"x")
        except OSError:
            pass  # buffer full means a wake-up is already pending

    def drain(self) -> None:
        try:
            while self._r.recv(4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self._r.close()
        self._w.close()


class WorkerLoop:
    """The claim loop and handler pool of one worker, on a thread of its own."""

    def __init__(
        self,
        worker: RegisteredWorker,
        *,
        engine: Engine,
        settings: Settings,
        child_config: child.ChildConfig,
        observer: Observer,
        on_item_done: Callable[[str, Any], None],
        secrets: tuple[str, ...],
        fed: bool = False,
        shares_source: bool = False,
        hint: poolers.Hint | None = None,
    ) -> None:
        """``fed``: the worker's source has the wake-up triggers (``tuning.FED_WRAP_SPACING``);
        ``shares_source``: another registered worker claims rows of the same source table."""
        self.worker = worker
        self.engine = engine
        self._ctx = Context(worker, engine, settings, observer, secrets,
                            hint or poolers.Hint(transaction_pooler=False),
                            spans=item_spans.for_worker(worker, engine))  # fmt: skip
        self._waker = Waker()
        self._stopping = threading.Event()
        self.claims_stopped = threading.Event()  # set once the loop saw the stop: no claim runs
        self._claim_now = False
        # Where claims look (see sweep.py); our own items that end unfinished or are given
        # back are named there, so they are claimed by key.
        postgres = engine.dialect.name == "postgresql"
        sweep = Sweep(
            keys_as_text=postgres, max_poll_seconds=settings.max_poll_seconds, lease_seconds=settings.lease_seconds,
            parse_key=None if postgres else functools.partial(tables.key_from_text, column=worker.key),
            fed=fed, shares_source=shares_source, marked=bool(worker.limits),
        )  # fmt: skip
        self.picker = Picker(sweep, lookup_every=min(LOOKUP_SECONDS, settings.max_poll_seconds))
        self.runner = Runner(worker, child_config, observer=observer, stopping=self._stopping)
        self.pool: Pool | AsyncPool = self.runner.pool
        self.fetcher = Fetcher(self._ctx, self.picker, hand_out=self.runner.enqueue)
        self.recorder = Recorder(self._ctx, self.picker, self.runner, on_item_done=on_item_done,
                                 stopping=self._stopping)  # fmt: skip
        self.pruner = Pruner(self._ctx)
        self.thread = threading.Thread(target=self._run, name=f"dbworker-{worker.name}", daemon=True)

    # --- control, from any thread ------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def request_stop(self) -> None:
        self._stopping.set()
        self._waker.wake()

    def end_running(self) -> int:
        """End running handlers now; their claims are given back by the loop."""
        n = self.pool.end_busy(Outcome.ABORTED)
        self._waker.wake()
        return n

    def wake(self, *keys: str, again: bool = False) -> None:
        """Claim now instead of at the end of the current poll wait.

        ``keys``: source rows that changed, as text; ``again``: their items were made
        claimable again (given back, or reset after they failed), even if they ended here.
        """
        self.picker.wake(keys, again=again)
        self._request_claim()

    def _request_claim(self) -> None:
        self._claim_now = True
        self._waker.wake()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    @property
    def paused(self) -> bool:
        """The worker is paused fleet-wide (sql/pauses.py): no claims."""
        return self.picker.paused

    def held_claims(self) -> list[items.Claim]:
        """Claims whose leases this loop keeps: running and prefetched (any thread)."""
        return self.runner.held_claims()

    def claims_lost(self, lost: list[items.Claim]) -> None:
        """These claims are no longer ours (cancelled, or taken over): end their handlers now
        (any thread). Their writes roll back with the process; nothing is recorded for them.
        """
        spans = self._ctx.spans
        if spans is not None:
            for c in lost:
                spans.event(c.token, tracing.LEASE_LOST)
        ended = self.runner.claims_lost({c.token for c in lost})
        if spans is not None:  # dropped from the queue, never handed over: their spans end here
            held = {c.token for c in self.runner.held_claims()}
            for c in lost:
                if c.token not in held:
                    spans.end(c.token, "lost", "the claim is no longer ours (cancelled or taken over)")
        if ended:
            self._waker.wake()

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        name = self.worker.name
        try:
            self.pool.start()
            self._loop()
        except BaseException:
            log.exception("dbworker worker %s: loop ended by an unexpected error", name)
        finally:
            self.claims_stopped.set()
            try:
                self.pool.shutdown()
            finally:
                self._waker.close()
                if self._ctx.spans is not None:
                    self._ctx.spans.end_all("aborted")
                self._ctx.observer.loop_ended(name)

    def _loop(self) -> None:
        settings, runner, picker = self._ctx.settings, self.runner, self.picker
        poll = Backoff(settings.poll_seconds, settings.max_poll_seconds)
        errors = Backoff(ERROR_FIRST_WAIT, ERROR_MAX_WAIT, jitter=0.5)
        locked = Backoff(LOCKED_ROWS_FIRST_WAIT, min(LOCKED_ROWS_MAX_WAIT, settings.max_poll_seconds))
        next_claim = 0.0
        timed = False  # is the claim due a timed poll (True) or a wake-up / completion (False)?
        last_wait: float | None = None
        last_trip = time.monotonic()
        while True:
            stopping = self._stopping.is_set()
            if stopping:
                self.claims_stopped.set()
                self.recorder.give_back(*runner.take_queued())  # not started: another process may take them now
                self.pool.cancel_pending()  # handed over but maybe not started: the same
                if not self.pool.busy_claims():
                    return
            now = time.monotonic()
            can_claim = not stopping and not picker.paused and runner.wanted() > 0
            if can_claim:
                timeout = max(0.0, next_claim - now)
            else:
                # Nothing to claim for now: still wake for a heartbeat round trip.
                timeout = max(0.0, last_trip + settings.max_poll_seconds - now)
            for soon in (self.pool.recall_long(), self.pool.end_overdue()):
                if soon is not None:
                    timeout = min(timeout, soon)
            if not stopping:
                if picker.lookup_due(now):
                    self._look_up(now)
                self.pruner.maybe(now)
                timeout = min(timeout, max(0.0, picker.lookup_at - now))
            due = picker.take_due(now)
            if due is not None and can_claim:  # wake when the next waiting item is due
                timeout = min(timeout, max(0.0, due - now))
                if due <= now:  # ... some are: claim them by key now
                    next_claim, timed = 0.0, False
            events, woken = self.pool.wait(timeout, [self._waker])
            if woken:
                self._waker.drain()
            if self._claim_now:
                self._claim_now = False
                next_claim, timed = 0.0, False
            for ev in events:
                if self.recorder.handle(ev):
                    next_claim, timed = 0.0, False
            runner.dispatch()
            if self._stopping.is_set():
                continue
            now = time.monotonic()
            want = runner.wanted()
            if want > 0 and now >= next_claim and not picker.paused:
                try:
                    taken = self.fetcher.claim(want)
                except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
                    self._ctx.db_error("claim", exc)
                    next_claim = time.monotonic() + errors.next()
                    continue
                self._ctx.told.discard("eligible")  # it returns a select() again
                errors.reset()
                last_trip = time.monotonic()
                if taken:
                    poll.reset()
                    last_wait = None
                if len(taken) >= want:
                    next_claim, timed = 0.0, False
                else:
                    # Nothing more is claimable now: wait. A timed poll that found nothing
                    # doubles the wait; a wake-up that found nothing keeps the current one,
                    # so the end of a burst does not push the next poll to the ceiling.
                    wait = poll.next() if timed or last_wait is None else last_wait
                    last_wait = wait
                    next_claim, timed = last_trip + wait, True
                    next_claim = picker.sweep.next_claim(next_claim)
                    if picker.sweep.skipped_locked:  # claimable once the holder commits
                        next_claim = min(next_claim, last_trip + locked.next())
                    else:
                        locked.reset()
            elif now - last_trip >= settings.max_poll_seconds:
                # No claim is due (all slots busy, or draining): keep the heartbeat honest.
                try:
                    self.fetcher.ping()
                    self._ctx.observer.heartbeat(self.worker.name, timestamp=time.time())
                    last_trip = time.monotonic()
                except Exception as exc:  # noqa: BLE001
                    self._ctx.db_error("claim", exc)
                    last_trip = time.monotonic() - settings.max_poll_seconds + errors.next()

    def _look_up(self, now: float) -> None:
        """The periodic lookup (``Fetcher.look_up``): wait for the waiting items it found,
        claim the expired ones at once; on a pause, stop claiming; on resuming, claim at once."""
        found = self.fetcher.look_up(now)
        if found is None:
            return  # an error keeps the last state (the lookup is tried again in a second)
        if found.expired:
            self._claim_now = True
        paused = self.picker.looked_up(found)
        if paused is None:
            return
        log.info("dbworker worker %s: %s", self.worker.name, "paused: not claiming" if paused else "resumed")
        self._ctx.observer.paused(self.worker.name, paused=paused)
        if not paused:
            self._claim_now = True
