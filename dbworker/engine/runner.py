"""Hands a worker's claimed items to its handler processes (``pool``), and keeps the ones
claimed ahead.

Short handlers get items claimed ahead (prefetched) and one handed over behind the running
one (pipelined), so a process goes on to its next item without a claim round trip; long
handlers get neither, so work is not held back from other pods. What an outcome means for
the item is the recorder's business.
"""

from __future__ import annotations

import collections
import threading

from dbworker import child
from dbworker.aiopool import AsyncPool
from dbworker.messages import Outcome
from dbworker.observe import Observer
from dbworker.pool import Pool
from dbworker.sql.items import Claim
from dbworker.tuning import (
    ASYNC_CLAIM_BATCH_BELOW_SECONDS,
    ASYNC_CLAIM_BATCH_DIVISOR,
    PREFETCH_BELOW_SECONDS,
    PREFETCH_MAX_PER_SLOT,
    PREFETCH_WINDOW_SECONDS,
)
from dbworker.workers import RegisteredWorker, describe_handler


class Runner:
    """The pool of one worker and its queue of claimed items not yet handed over.

    ``stopping``: set once the loop stops (nothing more is handed over behind a running item).
    """

    def __init__(self, worker: RegisteredWorker, child_config: child.ChildConfig, *,
                 observer: Observer, stopping: threading.Event) -> None:  # fmt: skip
        self._worker = worker
        self._observer = observer
        self._stopping = stopping
        # An item handed over behind one that runs longer than short handlers do is taken back.
        self.pool: Pool | AsyncPool
        if worker.asynchronous:  # many items per process, as coroutines
            self.pool = AsyncPool(child_config, worker.process_count, concurrency=worker.concurrency,
                                  timeout=worker.timeout, handler=describe_handler(worker.handler))  # fmt: skip
        else:
            self.pool = Pool(child_config, worker.concurrency, recall_after=PREFETCH_BELOW_SECONDS,
                             timeout=worker.timeout)  # fmt: skip
        self._queue: collections.deque[Claim] = collections.deque()
        self._lock = threading.Lock()
        # Tokens of handed-over claims found no longer ours (see claims_lost): a process that
        # answers "skipped" for one has not run it, and it is neither run nor given back.
        self._lost: set[str] = set()
        self._mean_seconds: float | None = None
        # The fewest items worth a claim: 1, but for an async worker carrying many items
        # that take under ASYNC_CLAIM_BATCH_BELOW_SECONDS on average, a tenth of them, so
        # that items finishing one by one are not refilled by one claim round trip each (the
        # claim, and the coordinator's and the server's work for it, come once per batch; an
        # idle worker still claims at once; a free slot waits about a tenth of a mean item).
        self._claim_batch = max(1, worker.concurrency // ASYNC_CLAIM_BATCH_DIVISOR) if worker.asynchronous else 1

    # --- any thread ----------------------------------------------------------------------
    def held_claims(self) -> list[Claim]:
        """Claims whose leases the loop keeps: running and prefetched."""
        with self._lock:
            queued = list(self._queue)
        return self.pool.held_claims() + queued

    def claims_lost(self, tokens: set[str]) -> bool:
        """These claims are no longer ours: drop the queued ones, end their handlers. True
        when a handler was ended (the loop hears of it)."""
        with self._lock:
            self._lost |= tokens
            kept = [c for c in self._queue if c.token not in tokens]
            self._queue.clear()
            self._queue.extend(kept)
        return self.pool.end_claims(tokens, Outcome.LOST) > 0

    # --- the loop's thread -----------------------------------------------------------------
    def prefetch(self) -> int:
        """How many items to keep claimed ahead: about PREFETCH_WINDOW_SECONDS of work per
        slot (1 to PREFETCH_MAX_PER_SLOT) for short handlers, so a slot that frees up starts
        its next item without a claim round trip and claims come in batches; none for long ones."""
        mean = self._mean_seconds
        if mean is None or mean >= PREFETCH_BELOW_SECONDS:
            return 0
        per_slot = min(PREFETCH_MAX_PER_SLOT, max(1, int(PREFETCH_WINDOW_SECONDS / max(mean, 1e-6))))
        return self._worker.concurrency * per_slot

    def pipelined(self) -> bool:
        """Short handlers also get one item handed over behind the running one."""
        return self.prefetch() > 0 and not self._stopping.is_set()

    def dispatch(self) -> None:
        """Hand queued items to the processes that can take one."""
        pipelined = self.pipelined()
        handed = 0
        try:
            while self.pool.open(pipelined=pipelined) > 0:
                with self._lock:
                    if not self._queue:
                        break
                    claim = self._queue.popleft()
                self.pool.submit(claim, pipelined=pipelined)
                handed += 1
        finally:
            self.pool.flush()  # an async pool sends what this dispatch handed over, together
        if handed:
            self._observer.active(self._worker.name, running=self.running())

    def wanted(self) -> int:
        """How many items to claim now: 0 unless a slot would otherwise wait, or the queue ran dry."""
        idle = self.pool.open(pipelined=self.pipelined())
        with self._lock:
            queued = len(self._queue)
        want = idle + self.prefetch() - queued
        if want <= 0 or (queued >= idle and queued > 0):
            return 0
        mean = self._mean_seconds
        if want < self._claim_batch and mean is not None and mean < ASYNC_CLAIM_BATCH_BELOW_SECONDS:
            return 0  # a few slots of many, soon more: wait for them (about a tenth of a mean item)
        return want

    def enqueue(self, taken: list[Claim]) -> None:
        """Claimed items, in order: handed over at once where a process can take one."""
        if taken:
            with self._lock:
                self._queue.extend(taken)
            self.dispatch()

    def take_queued(self) -> list[Claim]:
        """Every queued item (on a stop: to give back)."""
        with self._lock:
            queued = list(self._queue)
            self._queue.clear()
        return queued

    def ran(self, claim: Claim, seconds: float) -> None:
        """A process reported ``claim`` after ``seconds`` of handler time."""
        if self._lost:
            with self._lock:
                self._lost.discard(claim.token)
        mean = self._mean_seconds
        self._mean_seconds = seconds if mean is None else 0.8 * mean + 0.2 * seconds

    def skipped(self, claim: Claim) -> bool:
        """A process did not start ``claim`` (a stop, or a recall). True: it was found lost
        meanwhile (not ours to run or give back)."""
        with self._lock:
            lost = claim.token in self._lost
            self._lost.discard(claim.token)
        return lost

    def put_first(self, claim: Claim) -> None:
        """``claim`` (taken back from behind a long item) is still ours: next in line."""
        with self._lock:
            self._queue.appendleft(claim)

    def running(self) -> int:
        return len(self.pool.busy_claims())
