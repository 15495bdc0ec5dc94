"""One claim loop per worker: poll, claim, hand items to the pool, record what comes back.

The loop owns its pool. It never ends because of the database: every error is logged,
reported and retried with backoff, and claiming resumes by itself when the server is back.
It claims only while it has idle handler processes, waits ``poll_seconds`` (doubling to
``max_poll_seconds``) after finding nothing, and claims again at once when an item ends.
"""

from __future__ import annotations

import collections
import functools
import heapq
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection, Engine

from dbworker import child, messages, redact
from dbworker.backoff import Backoff
from dbworker.observe import Observer
from dbworker.pool import Died, Done, EndReason, Pool, Skipped, describe_exit
from dbworker.settings import Settings
from dbworker.sql import attempts, claims, dialects, notify, pauses, poolers, sweeps, tables
from dbworker.sql.dialects import connect
from dbworker.sweep import Sweep
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")

ERROR_FIRST_WAIT = 0.1
ERROR_MAX_WAIT = 5.0
PREFETCH_BELOW_SECONDS = 0.5  # handlers faster than this on average get prefetched items
PREFETCH_WINDOW_SECONDS = 0.1  # ... as many per slot as fit in this much handler time
PREFETCH_MAX_PER_SLOT = 16
# How often a loop reads the soonest waiting items of its worker and whether it is paused
# fleet-wide (at most max_poll_seconds), both on one connection: an item another pod made wait
# is picked up within this much of its time, and a pause stops claims within it.
LOOKUP_SECONDS = 1.0
# A round skipped rows another transaction held (another worker's claim on the same source,
# an application's lock): the loop claims again this soon, doubling while they stay held.
HELD_FIRST_WAIT = 0.02


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
        """``fed``: the worker's source has the wake-up triggers (``sweep.FED_WRAP_SPACING``);
        ``shares_source``: another registered worker claims rows of the same source table."""
        self.worker = worker
        self.engine = engine
        self._settings = settings
        self._observer = observer
        self._on_item_done = on_item_done
        self._secrets = secrets
        self._hint = hint or poolers.Hint(transaction_pooler=False)  # names a missing pooler setting
        # An item handed over behind one that runs longer than short handlers do is taken back.
        self.pool = Pool(child_config, worker.concurrency, recall_after=PREFETCH_BELOW_SECONDS,
                         timeout=worker.timeout)  # fmt: skip
        # Items of this worker waiting for a time (a retry delay, Unfinished(after=)): (when,
        # key), monotonic, and each key's earliest time. Ours are known when they end;
        # others' (another pod's, or from before a restart) are read through the not_before
        # index every LOOKUP_SECONDS. Each is claimed by key when due.
        self._due: list[tuple[float, Any]] = []
        self._due_keys: dict[Any, float] = {}
        self._due_lock = threading.Lock()
        self.paused = False  # the worker is paused fleet-wide (sql/pauses.py): no claims
        self._lookup_at = 0.0
        self._lookup_every = min(LOOKUP_SECONDS, settings.max_poll_seconds)
        self._waker = Waker()
        self._stopping = threading.Event()
        self.claims_stopped = threading.Event()  # set once the loop saw the stop: no claim runs
        self._claim_now = False
        # Where claims look (see sweep.py); our own items that end unfinished or are given
        # back are named there, so they are claimed by key.
        postgres = engine.dialect.name == "postgresql"
        self.sweep = Sweep(
            keys_as_text=postgres, max_poll_seconds=settings.max_poll_seconds,
            parse_key=None if postgres else functools.partial(tables.key_from_text, column=worker.key), fed=fed,
        )  # fmt: skip
        self._fleet_wrap = False  # this loop won the fleet's wrap (sql.sweeps): record it
        # Claims lock the source rows they take: another worker's claim on the same table
        # makes a round skip rows it holds for a moment, which the cursor must not pass.
        self._shares_source = shares_source
        self._held = False  # the last claim's sweep skipped rows another transaction held
        self._queue: collections.deque[claims.Claim] = collections.deque()
        self._queue_lock = threading.Lock()
        self._lost: set[str] = set()  # tokens of handed-over claims found lost (see claims_lost)
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

        ``keys``: source rows that changed, as text; ``again``: their items were made
        claimable again (given back, or reset after they failed), even if they ended here.
        """
        self.sweep.wake(keys, again=again)
        self._request_claim()

    def _request_claim(self) -> None:
        self._claim_now = True
        self._waker.wake()

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
            self.claims_stopped.set()
            try:
                self.pool.shutdown()
            finally:
                self._waker.close()
                self._observer.loop_ended(name)

    def claims_lost(self, lost: list[claims.Claim]) -> None:
        """These claims are no longer ours (cancelled, or taken over): end their handlers now
        (any thread). Their writes roll back with the process; nothing is recorded for them.
        """
        tokens = {c.token for c in lost}
        with self._queue_lock:
            self._lost |= tokens  # a handed-over one answers "skipped": dropped, not run
            kept = [c for c in self._queue if c.token not in tokens]
            self._queue.clear()
            self._queue.extend(kept)
        if self.pool.end_claims(tokens, EndReason.LOST):
            self._waker.wake()

    def _wait_until(self, source_id: Any, seconds: float | None) -> None:
        """Claim ``source_id`` by key once ``seconds`` have passed (None or <= 0: at once)."""
        if seconds is None or seconds <= 0:
            self.sweep.claimable_again(source_id)
            return
        when = time.monotonic() + seconds
        with self._due_lock:
            known = self._due_keys.get(source_id)
            if known is not None and time.monotonic() < known <= when + 0.001:
                return  # already waited for (the lookup finds our own waiting items too)
            self._due_keys[source_id] = when
            heapq.heappush(self._due, (when, source_id))

    def _take_due(self, now: float) -> float | None:
        """Name the waiting items now due for the next claim; return when the next one is due
        (``now`` when some just were; None: none waits).
        """
        with self._due_lock:
            named = False
            while self._due and self._due[0][0] <= now:
                when, source_id = heapq.heappop(self._due)
                if self._due_keys.get(source_id) == when:
                    del self._due_keys[source_id]
                    self.sweep.claimable_again(source_id)
                    named = True
            return now if named else self._due[0][0] if self._due else None

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
        held = Backoff(HELD_FIRST_WAIT, settings.max_poll_seconds)
        next_claim = 0.0
        timed = False  # is the claim due a timed poll (True) or a wake-up / completion (False)?
        last_wait: float | None = None
        last_trip = time.monotonic()
        while True:
            stopping = self._stopping.is_set()
            if stopping:
                self.claims_stopped.set()
                self._give_back_queued()  # not started: another process may take them now
                self.pool.cancel_pending()  # handed over but maybe not started: the same
                if not self.pool.busy_claims():
                    return
            now = time.monotonic()
            can_claim = not stopping and not self.paused and self._wanted() > 0
            if can_claim:
                timeout = max(0.0, next_claim - now)
            else:
                # Nothing to claim for now: still wake for a heartbeat round trip.
                timeout = max(0.0, last_trip + settings.max_poll_seconds - now)
            for soon in (self.pool.recall_long(), self.pool.end_overdue()):
                if soon is not None:
                    timeout = min(timeout, soon)
            if not stopping:
                if now >= self._lookup_at:
                    self._look_up(now)
                timeout = min(timeout, max(0.0, self._lookup_at - now))
            due = self._take_due(now)
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
                if self._handle(ev):
                    next_claim, timed = 0.0, False
            self._dispatch()
            if self._stopping.is_set():
                continue
            now = time.monotonic()
            want = self._wanted()
            if want > 0 and now >= next_claim and not self.paused:
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
                    next_claim = self.sweep.next_claim(next_claim)
                    if self._held:  # held rows are claimable once their holder commits
                        next_claim = min(next_claim, last_trip + held.next())
                    else:
                        held.reset()
            elif now - last_trip >= settings.max_poll_seconds:
                # No claim is due (all slots busy, or draining): keep the heartbeat honest.
                try:
                    with dialects.connect_reads(self.engine) as conn:
                        dialects.ping(conn)
                    self._observer.heartbeat(self.worker.name, timestamp=time.time())
                    last_trip = time.monotonic()
                except Exception as exc:  # noqa: BLE001
                    self._db_error("claim", exc)
                    last_trip = time.monotonic() - settings.max_poll_seconds + errors.next()

    def _claim(self, limit: int) -> list[claims.Claim]:
        w, sweep = self.worker, self.sweep
        start = time.perf_counter()
        now = time.monotonic()
        ask = sweep.begin(now)
        taken: list[claims.Claim] = []
        with connect(self.engine) as conn:
            if ask:
                self._take_turn(conn, now)
            named, unnamed = sweep.take_named()
            wrapped = sweep.wrapping
            try:
                if named:
                    # Rows named (by wake-ups, or our own items claimable again) behind the
                    # sweep: claimed by key, and handed out before the sweep's own round trip.
                    taken += self._round(conn, limit, named).taken
                    self._enqueue(taken)
                if len(taken) < limit:
                    taken += self._sweep(conn, limit - len(taken))
                if unnamed and not wrapped and not sweep.wrapping:
                    if len(taken) >= limit:
                        sweep.put_back([], unnamed=True)  # no room now: the next claim looks
                    elif sweep.behind(now):
                        taken += self._sweep(conn, limit - len(taken))
            except Exception:
                sweep.put_back(named, unnamed=unnamed)  # claimed by key once the database is back
                raise
            if sweep.expired_due(now):
                # After the rounds, so no item waits for this lookup: what it finds is
                # claimed by key at once, in the next claim (or when due).
                expired = claims.expired(conn, w.table, notify.MAX_NAMED_ROWS)
                for source_id in expired:
                    sweep.claimable_again(source_id)
                if expired:
                    self._request_claim()
        seconds = time.perf_counter() - start
        taken_over = [c for c in taken if c.taken_over]
        for c in taken_over:
            log.warning(
                "dbworker worker %s: took over item %r whose lease had expired (its process died,"
                " or could not reach the database to renew it)",
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

    def _take_turn(self, conn: Connection, now: float) -> None:
        """Ask the fleet whether this loop walks the history now (see ``sql.sweeps``)."""
        try:
            turn = sweeps.take(conn, self.worker.name, spacing=self.sweep.least_spacing)
        except Exception as exc:  # noqa: BLE001 - without the table (not migrated) it wraps alone
            log.debug("dbworker worker %s: fleet wrap unknown (%s); wrapping here", self.worker.name,
                      redact.describe(exc, self._secrets))  # fmt: skip
            self.sweep.turn(now, won=True, due_in=0.0)
            return
        low = sweeps.after(turn.low, self.worker.key)
        starting = not self.sweep.started
        if starting and low is not None and not turn.won:
            top = claims.top_key(conn, self.worker.key)
            if top is None or low > top:  # the source was emptied since: keys start over
                low = None
        self.sweep.turn(now, won=turn.won, due_in=turn.due_in, low=low)
        self._fleet_wrap = turn.won
        if starting and not self.sweep.wrapping:
            # Starting where the fleet's last wrap left off: items made claimable again since
            # (given back by pods that stopped, reset) may lie below it.
            try:
                ready = claims.ready_unfinished(conn, self.worker.table, notify.MAX_NAMED_ROWS + 1)
            except Exception:
                self.sweep.restart_at(None)  # unread: the first round walks from the first row
                raise
            if len(ready) > notify.MAX_NAMED_ROWS:
                self.sweep.cursor = None  # too many to name: walk from the first row
            for source_id in ready:
                self.sweep.claimable_again(source_id)

    def _sweep(self, conn: Connection, limit: int) -> list[claims.Claim]:
        """The sweep's next round, from the cursor (None: from the start); moves the cursor."""
        wrap = self.sweep.wrapping
        after, inclusive = self.sweep.cursor, self.sweep.inclusive
        self._held = False
        rnd = self._round(conn, limit)
        if rnd.swept and self.sweep.advance(rnd.last_key, inclusive=rnd.inclusive):
            # Nothing taken past the cursor. Before it moves to the top, a read without locks
            # tells whether a row was only skipped, held by another transaction (SKIP
            # LOCKED: another worker's claim over the same rows, an application's update):
            # then the cursor stays, and the next claim finds it. (An ordered query's round
            # has already looked this way.)
            held = not rnd.inclusive and rnd.last_key is None and claims.first_claimable(
                conn, table=self.worker.table, key=self.worker.key, eligible=self.worker.eligible, after=after
            ) is not None
            self._held = held
            if not held:
                self.sweep.at_top(claims.top_key(conn, self.worker.key))
        elif rnd.swept and self._shares_source and not rnd.inclusive:
            # The round took rows up to last_key: if it skipped one below that another
            # worker's claim held (a read without locks), the next round starts where this
            # one did.
            passed = claims.first_claimable(
                conn, table=self.worker.table, key=self.worker.key, eligible=self.worker.eligible, after=after
            )
            if passed is not None and passed < rnd.last_key:
                self.sweep.restart_at(after, inclusive=inclusive)
                self._held = True
        if wrap and self._fleet_wrap:
            self._fleet_wrap = False
            self._record_wrap(conn, rnd, full=len(rnd.taken) >= limit)
        self._enqueue(rnd.taken)
        return rnd.taken

    def _record_wrap(self, conn: Connection, rnd: claims.Round, *, full: bool) -> None:
        """Tell the fleet where this loop's wrap left off, and when the next is due. A wrap
        that took all it could may have left claimable rows behind other pods' cursors:
        they are told to look (a wake-up naming no row).
        """
        if rnd.taken:
            found = rnd.last_key if rnd.inclusive else rnd.taken[0].source_id
            low = notify.key_text(found)
        else:
            top = notify.key_text(self.sweep.cursor) if self.sweep.cursor is not None else ""
            low = None if top is None else sweeps.TOP + top
        try:
            sweeps.record(conn, self.worker.name, low, spacing=self.sweep.wrap_spacing)
            if full:
                notify.announce_table(conn, self.worker.key.table.name)
                conn.commit()
        except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
            self._db_error("claim", exc)

    def _round(self, conn: Connection, limit: int, keys: list[Any] | None = None) -> claims.Round:
        """One claim round trip: of the rows named by ``keys``, else the sweep's next rows."""
        start = time.monotonic()
        wrap = keys is None and self.sweep.wrapping
        rnd = claims.claim(
            conn,
            table=self.worker.table,
            key=self.worker.key,
            eligible=self.worker.eligible,
            limit=limit,
            lease_seconds=self._settings.lease_seconds,
            after=self.sweep.cursor if keys is None else None,
            keys=keys,
            inclusive=self.sweep.inclusive,
        )
        if wrap:
            self.sweep.wrapped(started=start, now=time.monotonic())
        return rnd

    def _handle(self, ev: Done | Skipped | Died) -> bool:
        """Record one pool event; True when a slot became free for claiming."""
        name = self.worker.name
        if isinstance(ev, Done):
            if self._lost:
                with self._queue_lock:
                    self._lost.discard(ev.claim.token)
            report = ev.report
            outcome = report.outcome
            mean = self._mean_seconds
            self._mean_seconds = report.seconds if mean is None else 0.8 * mean + 0.2 * report.seconds
            if outcome in (messages.UNFINISHED, messages.RETRIED):
                self._wait_until(ev.claim.source_id, report.after)
            if outcome in (messages.FAILED, messages.RETRIED, messages.RETRY):
                self._hint.check(name, report.summary)  # the load or the commit, through a pooler
            if outcome == messages.RETRIED:
                log.warning(
                    "dbworker worker %s: handler failed for item %r, retried in %.3g s: %s%s",
                    name, ev.claim.source_id, report.after or 0.0, report.summary, _trace(report),
                )
            if outcome == messages.FAILED:
                log.warning(
                    "dbworker worker %s: handler failed for item %r: %s%s",
                    name, ev.claim.source_id, report.summary, _trace(report),
                )
            elif outcome == messages.LOST:
                log.warning(
                    "dbworker worker %s: lost the claim of item %r before its commit; result discarded",
                    name, ev.claim.source_id,
                )
            elif outcome == messages.RETRY:
                log.warning(
                    "dbworker worker %s: database error in the handler process for item %r: %s; "
                    "the claim is given back", name, ev.claim.source_id, report.summary,
                )
                self._observer.db_error(name, operation="complete", error=RuntimeError(report.summary))
                self._give_back(ev.claim)
                outcome = messages.LOST
            self._observer.executed(name, outcome=outcome, seconds=report.seconds)
            self._observer.active(name, running=len(self.pool.busy_claims()))
            if outcome in (messages.FINISHED, messages.FAILED):
                self.sweep.ended(ev.claim.source_id)
            if outcome in (messages.FINISHED, messages.UNFINISHED, messages.FAILED):
                self._on_item_done(name, ev.claim.source_id)
            return True
        if isinstance(ev, Skipped):
            with self._queue_lock:
                lost = ev.claim.token in self._lost
                self._lost.discard(ev.claim.token)
            if lost:
                pass  # cancelled or taken over while handed over: not ours to run or give back
            elif self._stopping.is_set():
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
            # Ended by a stop deadline: given back without counting, so a deploy never uses
            # up an item's attempts.
            self._give_back(ev.claim)
            self._observer.executed(name, outcome=messages.ABORTED, seconds=None)
        elif ev.ended is EndReason.LOST:
            # Cancelled or taken over: the record is someone else's now; the writes rolled back.
            self._observer.executed(name, outcome=messages.LOST, seconds=None)
        else:
            timed_out = ev.ended is EndReason.TIMED_OUT
            if timed_out:
                error = f"handler timed out after {self.worker.timeout:g} s"
            else:
                error = f"handler process died: {describe_exit(ev.exitcode)}"
            outcome = self._attempt_failed(ev.claim, error)
            if outcome == messages.FAILED:
                outcome = messages.TIMED_OUT if timed_out else messages.CRASHED
            self._observer.executed(name, outcome=outcome, seconds=None)
        self._observer.active(name, running=len(self.pool.busy_claims()))
        return False

    def _look_up(self, now: float) -> None:
        """Read whether the worker is paused, the soonest waiting items through the not_before
        index, and with a due column the soonest due source rows through its index: wait for
        each; on resuming, claim at once. One read-only connection (``dialects.connect_reads``);
        an error keeps the last state (the lookup is tried again in a second)."""
        self._lookup_at = now + self._lookup_every
        overdue = 2 * self._lookup_every
        try:
            with dialects.connect_reads(self.engine) as conn:
                with conn.begin():  # each read in its own transaction, as attempts' are
                    paused = pauses.is_paused(conn, self.worker.name)
                waiting = attempts.due(conn, self.worker.table, notify.MAX_NAMED_ROWS, overdue=overdue)
                if self.worker.due is not None:
                    waiting += attempts.source_due(conn, self.worker.table, self.worker.due,
                                                   notify.MAX_NAMED_ROWS, within=overdue)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
            self._db_error("claim", exc)
            return
        for source_id, seconds in waiting:
            self._wait_until(source_id, seconds)
        if paused == self.paused:
            return
        self.paused = paused
        log.info("dbworker worker %s: %s", self.worker.name, "paused: not claiming" if paused else "resumed")
        self._observer.paused(self.worker.name, paused=paused)
        if not paused:
            self._claim_now = True

    def _attempt_failed(self, claim: claims.Claim, error: str) -> str:
        """Record an attempt whose process ended with the item (died, timed out): retried if
        the worker's Retry allows, else failed. Returns ``messages.RETRIED``, ``FAILED`` or ``LOST``.
        """
        retry = self.worker.retry
        try:
            with connect(self.engine) as conn:
                outcome, after = attempts.fail(conn, self.worker.table, claim, error=error, retry=retry)
        except Exception as exc:
            self._db_error("complete", exc)
            return messages.FAILED
        if outcome == messages.RETRIED:
            log.warning("dbworker worker %s: item %r: %s; retried", self.worker.name, claim.source_id, error)
            self._wait_until(claim.source_id, after)
        else:
            log.warning("dbworker worker %s: item %r failed: %s", self.worker.name, claim.source_id, error)
        return outcome

    def _give_back(self, *given: claims.Claim, started: bool = False) -> None:
        """Release claims so any process may take them now, and say so (PostgreSQL).

        Other pods' sweeps may have passed these items: the notification has them claimed
        by key at once instead of at the sweeps' next wraps. ``started``: their attempts count.
        """
        released = []
        for claim in given:
            self.sweep.claimable_again(claim.source_id)
            try:
                with connect(self.engine) as conn:
                    if claims.release(conn, self.worker.table, claim, started=started):
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
        self._hint.check(self.worker.name, exc)
        self._observer.db_error(self.worker.name, operation=operation, error=exc)


def _trace(report: messages.Report) -> str:
    """The handler's traceback (masked in the handler process) as the end of a log record."""
    return f"\n{report.traceback.rstrip()}" if report.traceback else ""
