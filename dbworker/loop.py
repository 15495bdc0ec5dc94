"""One claim loop per worker: poll, claim, hand items to the pool, record what comes back.

The loop owns its pool. It never ends because of the database: every error is logged,
reported and retried with backoff, and claiming resumes by itself when the server is back.
It claims only while it has idle handler processes, waits ``poll_seconds`` (doubling to
``max_poll_seconds``) after finding nothing, and claims again at once when an item ends.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dbworker import child, redact
from dbworker.backoff import Backoff
from dbworker.observe import Observer
from dbworker.pool import Died, Done, EndReason, Pool, Skipped, describe_exit
from dbworker.sql import claims, notify
from dbworker.sql.dialects import connect
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")

ERROR_FIRST_WAIT = 0.1
ERROR_MAX_WAIT = 5.0
PREFETCH_BELOW_SECONDS = 0.5  # handlers faster than this on average get prefetched items
PREFETCH_WINDOW_SECONDS = 0.1  # ... as many per slot as fit in this much handler time
PREFETCH_MAX_PER_SLOT = 16
# A sweep from the start (a wrap) walks the finished history once: the next one waits at
# least this many times as long as the last took, so wraps cost at most about 1% of the
# time whatever the history (100,000 finished items: ~0.1 s on PostgreSQL here).
WRAP_SPACING = 100
# Keys of items this loop saw end recently: a notification for one of them is most likely
# its handler's own write to its row, which needs no claim.
RECENT_ENDED = 1024


@dataclass(frozen=True)
class Settings:
    """Timing settings shared by every loop of a coordinator (validated by the coordinator)."""

    lease_seconds: float
    poll_seconds: float
    max_poll_seconds: float


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
    ) -> None:
        self.worker = worker
        self.engine = engine
        self._settings = settings
        self._observer = observer
        self._on_item_done = on_item_done
        self._secrets = secrets
        # An item handed over behind one that runs longer than short handlers do is taken back.
        self.pool = Pool(child_config, worker.concurrency, recall_after=PREFETCH_BELOW_SECONDS)
        self._waker = Waker()
        self._stopping = threading.Event()
        self._claim_now = False
        # Key-order sweep cursor for eligible queries without an order (see claims.claim):
        # it wraps to the start every max_poll_seconds. One of our items that ends unfinished
        # or is given back is claimed by key instead (see _claimable_again).
        self._cursor: Any = None
        self._wrap_at = 0.0
        # Between wraps, expired claims (a dead process's items) are looked up through the
        # lease index every max_poll_seconds and claimed by key: wraps may be far apart.
        self._expired_at = 0.0
        self._queue: collections.deque[claims.Claim] = collections.deque()
        self._queue_lock = threading.Lock()
        # Source rows to claim by key: named by notifications, or our own items claimable
        # again. On PostgreSQL their keys' text form (what notifications carry), else values.
        self._changed: set[Any] = set()
        self._keys_as_text = engine.dialect.name == "postgresql"
        self._changed_many = False  # ... more than notify.MAX_NAMED_ROWS of them: sweep instead
        self._again: set[Any] = set()  # ... of items made claimable again (not handlers' own writes)
        # A wake-up that named no row (SQLite's commit watcher, a dependency on another row,
        # any wake-up off PostgreSQL): what changed may lie behind the cursor (see _claim).
        self._unnamed = False
        self._wrap_allowed_at = 0.0  # ... when such a wake-up may wrap (see WRAP_SPACING)
        self._wrap_owed = False  # ... one could not have it yet: due at _wrap_allowed_at
        self._ended: collections.deque[str] = collections.deque(maxlen=RECENT_ENDED)
        self._ended_set: set[str] = set()
        self._mean_seconds: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"dbworker-{worker.name}", daemon=True)

    # --- control, from any thread ------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def request_stop(self) -> None:
        self._stopping.set()
        self._waker.wake()

    def end_running(self) -> int:
        """End running handlers now; their claims are given back by the loop."""
        n = self.pool.end_busy(EndReason.ABORTED)
        self._waker.wake()
        return n

    def wake(self, *keys: str, again: bool = False) -> None:
        """Claim now instead of at the end of the current poll wait.

        ``keys``: source rows that changed, as text (PostgreSQL, where claims take rows by
        that form; elsewhere the loop sweeps instead); ``again``: their items were made
        claimable again (given back, or reset after they failed), even if they ended here.
        """
        if keys and self._keys_as_text:
            for key in keys:
                self._name(key, again=again)
        else:
            with self._queue_lock:
                self._unnamed = True
        self._request_claim()

    def _request_claim(self) -> None:
        self._claim_now = True
        self._waker.wake()

    def _name(self, key: Any, *, again: bool = False) -> None:
        """Have the next claim take ``key``'s row by key (in ``claims.claim``'s form of keys)."""
        with self._queue_lock:
            if len(self._changed) < notify.MAX_NAMED_ROWS:
                self._changed.add(key)
                if again:
                    self._again.add(key)
            else:
                self._changed_many = True

    def _claimable_again(self, source_id: Any) -> None:
        """An item that may be claimable again: ours that ended unfinished or was given back,
        or one whose claim expired.

        It is named for the next claim, wherever the cursor stands. Sweeping from the first
        row instead would walk the whole finished history once for every such item.
        """
        if not self._keys_as_text:
            self._name(source_id)
            return
        key = notify.key_text(source_id)
        if key is None:
            self._cursor = None  # no text form to name it by: the next claim sweeps from the start
            return
        self._name(key, again=True)

    def _take_changed(self) -> tuple[list[Any], bool]:
        """Changed rows the sweep would not reach before its next wrap: to claim by key now;
        and whether a wake-up came that named no row.

        Rows past the cursor are left to the sweep (the usual insert of a new, higher key
        costs nothing extra). Too many changes at once make this claim sweep from the start.
        """
        with self._queue_lock:
            keys, many, again, unnamed = sorted(self._changed), self._changed_many, self._again, self._unnamed
            self._changed, self._changed_many, self._again, self._unnamed = set(), False, set(), False
        if many:
            self._cursor = None
        cursor = self._cursor
        if cursor is None:
            return [], False  # this claim sweeps from the start: it reaches every row
        keys = [k for k in keys if k in again or k not in self._ended_set]
        if isinstance(cursor, int) and not isinstance(cursor, bool):
            keys = [k for k in keys if not (notify.int_past(k, cursor) if isinstance(k, str) else k > cursor)]
        return keys, unnamed

    def _note_ended(self, source_id: Any) -> None:
        key = notify.key_text(source_id)
        if key is None:
            return  # no text form to match notifications against
        if len(self._ended) == self._ended.maxlen:
            self._ended_set.discard(self._ended[0])
        self._ended.append(key)
        self._ended_set.add(key)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        name = self.worker.name
        try:
            self.pool.start()
            self._loop()
        except BaseException:
            log.exception("dbworker worker %s: loop ended by an unexpected error", name)
        finally:
            try:
                self.pool.shutdown()
            finally:
                self._waker.close()
                self._observer.loop_ended(name)

    def held_claims(self) -> list[claims.Claim]:
        """Claims whose leases this loop keeps: running and prefetched (any thread)."""
        with self._queue_lock:
            queued = list(self._queue)
        return self.pool.held_claims() + queued

    def _prefetch(self) -> int:
        # Short handlers: keep claimed items waiting (about PREFETCH_WINDOW_SECONDS of work
        # per slot, 1 to PREFETCH_MAX_PER_SLOT), so a slot that frees up starts its next item
        # without a claim round trip and claims come in batches. Long handlers: none, so
        # work is not held back from other pods.
        mean = self._mean_seconds
        if mean is None or mean >= PREFETCH_BELOW_SECONDS:
            return 0
        per_slot = min(PREFETCH_MAX_PER_SLOT, max(1, int(PREFETCH_WINDOW_SECONDS / max(mean, 1e-6))))
        return self.worker.concurrency * per_slot

    def _pipelined(self) -> bool:
        # Short handlers also get one item handed over behind the running one, so a process
        # goes on to its next item without waiting for this loop to hear of the last.
        return self._prefetch() > 0 and not self._stopping.is_set()

    def _dispatch(self) -> None:
        pipelined = self._pipelined()
        while self.pool.open(pipelined=pipelined) > 0:
            with self._queue_lock:
                if not self._queue:
                    break
                claim = self._queue.popleft()
            self.pool.submit(claim, pipelined=pipelined)
            self._observer.active(self.worker.name, running=len(self.pool.busy_claims()))

    def _wanted(self) -> int:
        """How many items to claim now: 0 unless a slot would otherwise wait, or the queue ran dry."""
        idle = self.pool.open(pipelined=self._pipelined())
        with self._queue_lock:
            queued = len(self._queue)
        want = idle + self._prefetch() - queued
        if want <= 0 or (queued >= idle and queued > 0):
            return 0
        return want

    def _give_back_queued(self) -> None:
        with self._queue_lock:
            queued = list(self._queue)
            self._queue.clear()
        self._give_back(*queued)

    def _loop(self) -> None:
        settings = self._settings
        poll = Backoff(settings.poll_seconds, settings.max_poll_seconds)
        errors = Backoff(ERROR_FIRST_WAIT, ERROR_MAX_WAIT, jitter=0.5)
        next_claim = 0.0
        timed = False  # is the claim due a timed poll (True) or a wake-up / completion (False)?
        last_wait: float | None = None
        last_trip = time.monotonic()
        while True:
            stopping = self._stopping.is_set()
            if stopping:
                self._give_back_queued()  # not started: another process may take them now
                self.pool.cancel_pending()  # handed over but maybe not started: the same
                if not self.pool.busy_claims():
                    return
            now = time.monotonic()
            can_claim = not stopping and self._wanted() > 0
            if can_claim:
                timeout = max(0.0, next_claim - now)
            else:
                # Nothing to claim for now: still wake for a heartbeat round trip.
                timeout = max(0.0, last_trip + settings.max_poll_seconds - now)
            recall = self.pool.recall_long()
            if recall is not None:
                timeout = min(timeout, recall)
            events, woken = self.pool.wait(timeout, [self._waker])
            if woken:
                self._waker.drain()
            if self._claim_now:
                self._claim_now = False
                next_claim, timed = 0.0, False
            for ev in events:
                if self._handle(ev):
                    next_claim, timed = 0.0, False
            self._dispatch()
            if self._stopping.is_set():
                continue
            now = time.monotonic()
            want = self._wanted()
            if want > 0 and now >= next_claim:
                try:
                    taken = self._claim(want)
                except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
                    self._db_error("claim", exc)
                    next_claim = time.monotonic() + errors.next()
                    continue
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
                    if self._wrap_owed:
                        next_claim = min(next_claim, self._wrap_allowed_at)
            elif now - last_trip >= settings.max_poll_seconds:
                # No claim is due (all slots busy, or draining): keep the heartbeat honest.
                try:
                    with connect(self.engine) as conn:
                        conn.execute(sa.select(sa.literal(1)))
                    self._observer.heartbeat(self.worker.name, timestamp=time.time())
                    last_trip = time.monotonic()
                except Exception as exc:  # noqa: BLE001
                    self._db_error("claim", exc)
                    last_trip = time.monotonic() - settings.max_poll_seconds + errors.next()

    def _claim(self, limit: int) -> list[claims.Claim]:
        w = self.worker
        start = time.perf_counter()
        now = time.monotonic()
        if now >= self._wrap_at or (self._wrap_owed and now >= self._wrap_allowed_at):
            self._cursor = None  # sweep from the start now and then (see WRAP_SPACING): lower keys may be ready again
        taken: list[claims.Claim] = []
        with connect(self.engine) as conn:
            changed, unnamed = self._take_changed()
            wrapped = self._cursor is None
            if changed:
                # Rows named (by notifications, or our own items claimable again) behind the
                # sweep: claimed by key, and handed out before the sweep's own round trip.
                taken += self._round(conn, limit, changed).taken
                self._enqueue(taken)
            if len(taken) < limit:
                taken += self._sweep(conn, limit - len(taken))
            if unnamed and not wrapped and len(taken) < limit and self._cursor is not None:
                # A wake-up that did not say which row changed, and too little past the
                # cursor to explain it: the row may lie behind the cursor (enabled there, or
                # waiting on an item that just ended). Wrap now, or as soon as its cost allows.
                if now >= self._wrap_allowed_at:
                    self._cursor = None
                    taken += self._sweep(conn, limit - len(taken))
                else:
                    self._wrap_owed = True
            if self._cursor is not None and now >= self._expired_at:
                # After the rounds, so no item waits for this lookup: what it finds is
                # claimed by key at once, in the next claim.
                self._expired_at = now + self._settings.max_poll_seconds
                expired = claims.expired(conn, w.table, notify.MAX_NAMED_ROWS)
                for source_id in expired:
                    self._claimable_again(source_id)
                if expired:
                    self._request_claim()
        seconds = time.perf_counter() - start
        taken_over = [c for c in taken if c.taken_over]
        for c in taken_over:
            log.warning(
                "dbworker worker %s: took over item %r whose lease had expired (its process died)",
                w.name, c.source_id,
            )
        self._observer.claimed(w.name, count=len(taken), taken_over=len(taken_over), seconds=seconds)
        self._observer.heartbeat(w.name, timestamp=time.time())
        return taken

    def _enqueue(self, taken: list[claims.Claim]) -> None:
        if taken:
            with self._queue_lock:
                self._queue.extend(taken)
            self._dispatch()

    def _sweep(self, conn: Connection, limit: int) -> list[claims.Claim]:
        """The sweep's next round, from the cursor (None: from the start); moves the cursor."""
        wrap = self._cursor is None
        rnd = self._round(conn, limit)
        if rnd.swept and rnd.last_key is not None:
            self._cursor = rnd.last_key
        elif rnd.swept and wrap:
            # Nothing claimable in the whole source: the next claims start at its top
            # instead of walking it all again. A row committed meanwhile below the top
            # waits for the next wrap, unless a wake-up names it or looks behind the cursor.
            self._cursor = claims.top_key(conn, self.worker.key)
        self._enqueue(rnd.taken)
        return rnd.taken

    def _round(self, conn: Connection, limit: int, keys: list[Any] | None = None) -> claims.Round:
        """One claim round trip: of the rows named by ``keys``, else the sweep's next rows."""
        start = time.monotonic()
        rnd = claims.claim(
            conn,
            table=self.worker.table,
            key=self.worker.key,
            eligible=self.worker.eligible,
            limit=limit,
            lease_seconds=self._settings.lease_seconds,
            after=self._cursor if keys is None else None,
            keys=keys,
        )
        if keys is None and self._cursor is None:
            now = time.monotonic()
            self._wrap_allowed_at = now + WRAP_SPACING * (now - start)
            self._wrap_owed = False
            self._wrap_at = max(self._wrap_allowed_at, now + self._settings.max_poll_seconds)
            self._expired_at = now + self._settings.max_poll_seconds  # this wrap saw them
        return rnd

    def _handle(self, ev: Done | Skipped | Died) -> bool:
        """Record one pool event; True when a slot became free for claiming."""
        name = self.worker.name
        if isinstance(ev, Done):
            report = ev.report
            outcome = report.outcome
            mean = self._mean_seconds
            self._mean_seconds = report.seconds if mean is None else 0.8 * mean + 0.2 * report.seconds
            if outcome == child.UNFINISHED:
                self._claimable_again(ev.claim.source_id)
            if outcome == child.FAILED:
                log.warning(
                    "dbworker worker %s: handler failed for item %r: %s",
                    name, ev.claim.source_id, report.summary,
                )
            elif outcome == child.LOST:
                log.warning(
                    "dbworker worker %s: lost the claim of item %r before its commit; result discarded",
                    name, ev.claim.source_id,
                )
            elif outcome == child.RETRY:
                log.warning(
                    "dbworker worker %s: database error in the handler process for item %r: %s; "
                    "the claim is given back", name, ev.claim.source_id, report.summary,
                )
                self._observer.db_error(name, operation="complete", error=RuntimeError(report.summary))
                self._give_back(ev.claim)
                outcome = child.LOST
            self._observer.executed(name, outcome=outcome, seconds=report.seconds)
            self._observer.active(name, running=len(self.pool.busy_claims()))
            if outcome in (child.FINISHED, child.FAILED):
                self._note_ended(ev.claim.source_id)
            if outcome in (child.FINISHED, child.UNFINISHED, child.FAILED):
                self._on_item_done(name, ev.claim.source_id)
            return True
        if isinstance(ev, Skipped):
            if self._stopping.is_set():
                self._give_back(ev.claim)
            else:  # taken back from behind a long item: still ours, next in line
                with self._queue_lock:
                    self._queue.appendleft(ev.claim)
            self._observer.active(name, running=len(self.pool.busy_claims()))
            return True
        if ev.pending is not None:
            self._give_back(ev.pending)  # handed over behind the item that ended the process
        if ev.claim is None:
            if ev.before_ready:
                log.error(
                    "dbworker worker %s: a handler process %s before it was ready; starting another",
                    name, describe_exit(ev.exitcode),
                )
            return False
        if ev.ended is EndReason.ABORTED:
            self._give_back(ev.claim)
            self._observer.executed(name, outcome="aborted", seconds=None)
        else:
            error = f"handler process died: {describe_exit(ev.exitcode)}"
            log.warning("dbworker worker %s: item %r failed: %s", name, ev.claim.source_id, error)
            try:
                with connect(self.engine) as conn:
                    claims.fail(conn, self.worker.table, ev.claim, error)
            except Exception as exc:
                self._db_error("complete", exc)
            self._observer.executed(name, outcome="crashed", seconds=None)
        self._observer.active(name, running=len(self.pool.busy_claims()))
        return False

    def _give_back(self, *given: claims.Claim) -> None:
        """Release claims so any process may take them now, and say so (PostgreSQL).

        Other pods' sweeps may have passed these items: the notification has them claimed
        by key at once instead of at the sweeps' next wraps.
        """
        released = []
        for claim in given:
            self._claimable_again(claim.source_id)
            try:
                with connect(self.engine) as conn:
                    if claims.release(conn, self.worker.table, claim):
                        released.append(claim.source_id)
            except Exception as exc:
                self._db_error("complete", exc)
        if released:
            try:
                with connect(self.engine) as conn:
                    notify.announce_rows(conn, self.worker.key.table.name, released)
                    conn.commit()
            except Exception as exc:
                self._db_error("complete", exc)

    def _db_error(self, operation: str, exc: BaseException) -> None:
        log.warning(
            "dbworker worker %s: database error during %s: %s",
            self.worker.name, operation, redact.describe(exc, self._secrets),
        )
        self._observer.db_error(self.worker.name, operation=operation, error=exc)
