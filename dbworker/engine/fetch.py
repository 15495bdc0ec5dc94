"""Runs a worker's claims: the claim statements (``sql.claims``) and the reads the picker's
decisions need, and tells the picker what it saw.

Every decision (where the sweep goes, whether to wrap, what a read means) is the picker's
(``sweep``); this module only runs statements in the order a claim needs them. Database
errors of a claim propagate to the loop (which backs off); the lookup's are reported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection

from dbworker import redact
from dbworker.engine.context import Context
from dbworker.engine.picker import Lookup, Picker
from dbworker.sql import attempts, claims, dialects, notify, sweeps
from dbworker.sql.dialects import connect

log = logging.getLogger("dbworker")


class Fetcher:
    """Claims for one worker. ``hand_out``: claimed items go to the runner (named rows before
    the sweep's round trip)."""

    def __init__(self, ctx: Context, picker: Picker, *, hand_out: Callable[[list[claims.Claim]], None]) -> None:
        self._ctx = ctx
        self._picker = picker
        self._sweep = picker.sweep
        spans = ctx.spans
        # Tracing on: each claimed item gets its span (a child of its writer's) as it is handed
        # out; the first claims of items with no writer's context are stored after, off the
        # pick-up path.
        self._hand_out = hand_out if spans is None else (lambda taken: spans.started(hand_out, taken))
        self._spans = spans

    def claim(self, limit: int) -> list[claims.Claim]:
        """Claim up to ``limit`` items (handed out as they come); raises on a database error."""
        w, sweep = self._ctx.worker, self._sweep
        start = time.perf_counter()
        now = time.monotonic()
        taken: list[claims.Claim] = []
        with connect(self._ctx.engine) as conn:
            if self._picker.begin(now):
                self._take_turn(conn, now)
            plan = self._picker.plan()
            try:
                if plan.named:
                    # Rows named (by wake-ups, or our own items claimable again) behind the
                    # sweep: claimed by key, and handed out before the sweep's own round trip.
                    taken += self._round(conn, limit, plan.named).taken
                    got = [c.source_id for c in taken]
                    if len(taken) >= limit:
                        sweep.left_by_full_round(plan.named, got)
                    elif sweep.needs_named_claimable(plan.named, got, limit):
                        sweep.left_locked(claims.named_claimable(conn, table=w.table, key=w.key, eligible=w.eligible,
                                                                 keys=plan.named))  # fmt: skip
                    self._hand_out(taken)
                # A limited worker's round by key also read from its mark: it was the round.
                if len(taken) < limit and not (plan.named and w.limits):
                    taken += self._sweep_round(conn, limit - len(taken))
                if plan.unnamed and not plan.wrapping and not sweep.wrapping:
                    if len(taken) >= limit:
                        sweep.put_back([], unnamed=True)  # no room now: the next claim looks
                    elif sweep.behind(now):
                        taken += self._sweep_round(conn, limit - len(taken))
            except Exception:
                self._picker.put_back(plan)  # claimed by key once the database is back
                if self._spans is not None:
                    self._spans.claim_failed()
                raise
        seconds = time.perf_counter() - start
        taken_over = [c for c in taken if c.taken_over]
        for c in taken_over:
            log.warning(
                "dbworker worker %s: took over item %r whose lease had expired (its process died,"
                " or could not reach the database to renew it)",
                w.name, c.source_id,
            )  # fmt: skip
        observer = self._ctx.observer
        observer.claimed(w.name, count=len(taken), taken_over=len(taken_over), seconds=seconds)
        observer.heartbeat(w.name, timestamp=time.time())
        return taken

    def _take_turn(self, conn: Connection, now: float) -> None:
        """Ask the fleet whether this loop walks the history now (see ``sql.sweeps``)."""
        w, sweep = self._ctx.worker, self._sweep
        try:
            turn = sweeps.take(conn, w.name, spacing=sweep.least_spacing)
        except Exception as exc:  # noqa: BLE001 - without the table (not migrated) it wraps alone
            log.debug("dbworker worker %s: fleet wrap unknown (%s); wrapping here", w.name,
                      redact.describe(exc, self._ctx.secrets))  # fmt: skip
            sweep.turn(now, won=True, due_in=0.0, fleet=False)
            return
        low = sweeps.after(turn.low, w.key)
        starting = not sweep.started
        if sweep.needs_top_to_resume(won=turn.won, low=low):
            low = sweep.resume_at(low, claims.top_key(conn, w.key))
        sweep.turn(now, won=turn.won, due_in=turn.due_in, low=low)
        if starting and not sweep.wrapping:
            # Starting where the fleet's last wrap left off: items made claimable again since
            # (given back by pods that stopped, reset) may lie below it.
            try:
                ready = claims.ready_unfinished(conn, w.table, notify.MAX_NAMED_ROWS + 1)
            except Exception:
                sweep.restart_at(None)  # unread: the first round walks from the first row
                raise
            sweep.ready_again(ready)

    def _sweep_round(self, conn: Connection, limit: int) -> list[claims.Claim]:
        """The sweep's next round, from the cursor (None: from the start); the sweep moves
        the cursor on what it saw (``Sweep.saw``)."""
        w, sweep = self._ctx.worker, self._sweep
        wrap = sweep.wrapping
        start = sweep.position()
        rnd = self._round(conn, limit)
        lowest: Any = None
        if sweep.needs_lowest(rnd):  # a read without locks (see Sweep.needs_lowest)
            lowest = claims.first_claimable(conn, table=w.table, key=w.key, eligible=w.eligible, after=start.cursor)
        top = claims.top_key(conn, w.key) if sweep.needs_top(rnd, lowest) else None
        sweep.saw(start, rnd, lowest=lowest, top=top, full=len(rnd.taken) >= limit)
        if wrap and sweep.take_fleet_wrap():
            self._record_wrap(conn, rnd, full=len(rnd.taken) >= limit)
        self._hand_out(rnd.taken)
        return rnd.taken

    def _record_wrap(self, conn: Connection, rnd: claims.Round, *, full: bool) -> None:
        """Tell the fleet where this loop's wrap left off, and when the next is due. A wrap
        that took all it could may have left claimable rows behind other pods' cursors:
        they are told to look (a wake-up naming no row).
        """
        w = self._ctx.worker
        try:
            sweeps.record(conn, w.name, self._sweep.wrap_low(rnd), spacing=self._sweep.wrap_spacing)
            if full:
                notify.announce_table(conn, w.key.table.name)
                conn.commit()
        except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
            self._ctx.db_error("claim", exc)

    def _round(self, conn: Connection, limit: int, keys: list[Any] | None = None) -> claims.Round:
        """One claim round trip: of the rows named by ``keys``, else the sweep's next rows."""
        w, sweep = self._ctx.worker, self._sweep
        start = time.monotonic()
        wrap = keys is None and sweep.wrapping
        rnd = claims.claim(
            conn,
            table=w.table,
            key=w.key,
            eligible=w.eligible,
            limit=limit,
            lease_seconds=self._ctx.settings.lease_seconds,
            after=sweep.cursor if keys is None else None,
            keys=keys,
            inclusive=sweep.inclusive,
            limits=w.limits,
            # Tracing on: a claim in one statement reads what the items' spans need too.
            traced=self._spans is not None and self._spans.folds(conn),
        )
        if wrap:
            sweep.wrapped(started=start, now=time.monotonic())
        return rnd

    def look_up(self, now: float) -> Lookup | None:
        """Read whether the worker is paused and the soonest waiting items through the
        not_before index (one statement, ``attempts.lookup``), with a due column the soonest
        due source rows through its index, and when the sweep asks (``expired_due``) the
        expired claims through the lease index. One
        read-only connection (``dialects.connect_reads``); None on an error (reported; the
        picker keeps its last state and the lookup is tried again).
        """
        w = self._ctx.worker
        window = self._picker.lookup_window
        try:
            with dialects.connect_reads(self._ctx.engine) as conn:
                paused, waiting = attempts.lookup(conn, w.table, w.name, notify.MAX_NAMED_ROWS, overdue=window)
                if w.due is not None:
                    waiting += attempts.source_due(conn, w.table, w.due, notify.MAX_NAMED_ROWS, within=window)
                # Here, not in a claim: an idle loop claims only every poll (up to
                # max_poll_seconds), and a dead process's items must not wait for that.
                expired = claims.expired(conn, w.table, notify.MAX_NAMED_ROWS) if self._sweep.expired_due(now) else []
        except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
            self._ctx.db_error("claim", exc)
            return None
        return Lookup(paused, waiting, expired)

    def ping(self) -> None:
        """One round trip to the database (a heartbeat while no claim is due); raises."""
        with dialects.connect_reads(self._ctx.engine) as conn:
            dialects.ping(conn)
