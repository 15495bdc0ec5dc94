"""Turns what a worker's handler processes reported, or how they ended, into the items'
transitions and the wake-ups they owe.

A handler process commits its own outcome with the handler's writes (``child``); what is
left here is what only the coordinator can do: give back a claim whose handler never ran or
could not commit, record an attempt whose process died or timed out, have waiting items
claimed when due, and tell other loops (and pods) that an item ended.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from dbworker import messages, tracing
from dbworker.aiopool import Health
from dbworker.engine.context import Context
from dbworker.engine.picker import Picker
from dbworker.engine.runner import Runner
from dbworker.messages import Outcome
from dbworker.pool import Died, Done, Skipped, describe_exit
from dbworker.sql import claimer, failures, history, items, notify
from dbworker.sql.dialects import connect

log = logging.getLogger("dbworker")


class Recorder:
    """Records one worker's pool events. ``on_item_done``: the item ended (finished,
    unfinished or failed), for loops that wait on it; ``stopping``: set once the loop stops."""

    def __init__(self, ctx: Context, picker: Picker, runner: Runner, *,
                 on_item_done: Callable[[str, Any], None], stopping: threading.Event) -> None:  # fmt: skip
        self._ctx = ctx
        self._picker = picker
        self._runner = runner
        self._on_item_done = on_item_done
        self._stopping = stopping

    def handle(self, ev: Done | Skipped | Died | Health) -> bool:
        """Record one pool event; True when a slot became free for claiming."""
        if isinstance(ev, Health):
            self._ctx.observer.loop_health(self._ctx.worker.name, process=ev.process, lag_seconds=ev.lag_seconds,
                                           in_flight=ev.in_flight)  # fmt: skip
            return False
        if isinstance(ev, Done):
            report = ev.report
            with self._ending(ev.claim, Outcome(report.outcome).value, report.summary or report.error):
                self._done(ev)
            return True
        if isinstance(ev, Skipped):
            if self._runner.skipped(ev.claim):
                # cancelled or taken over while handed over: not ours to run or give back
                self._end_span(ev.claim, messages.LOST.value, event=tracing.CANCELLED)
            elif self._stopping.is_set():
                self.give_back(ev.claim)
            else:  # taken back from behind a long item: still ours, next in line
                if self._ctx.spans is not None:
                    self._ctx.spans.event(ev.claim.token, tracing.RECALLED)
                self._runner.put_first(ev.claim)
            self._active()
            return True
        self._died(ev)
        return False

    @contextlib.contextmanager
    def _ending(self, claim: items.Claim, outcome: str, error: str | None = None, *,
                event: str | None = None) -> Iterator[None]:  # fmt: skip
        """Tracing on: end ``claim``'s span with ``outcome``, current while recording it."""
        if self._ctx.spans is None:
            yield
            return
        with self._ctx.spans.ending(claim.token, outcome, error, event=event):
            yield

    def _end_span(self, claim: items.Claim, outcome: str, error: str | None = None, *,
                  event: str | None = None) -> None:  # fmt: skip
        with self._ending(claim, outcome, error, event=event):
            pass

    def _done(self, ev: Done) -> None:
        name, sid = self._ctx.worker.name, ev.claim.source_id
        report = ev.report
        outcome = report.outcome
        self._runner.ran(ev.claim, report.seconds)
        if outcome in (messages.UNFINISHED, messages.RETRIED):
            self._picker.wait_until(sid, report.after)
        if outcome in (messages.FAILED, messages.RETRIED, messages.RETRY, messages.TIMED_OUT):
            self._ctx.hint.check(name, report.summary)  # the load or the commit, through a pooler
        if outcome == messages.RETRIED:
            log.warning("dbworker worker %s: handler failed for item %r, retried in %.3g s: %s%s",
                        name, sid, report.after or 0.0, report.summary, _trace(report))  # fmt: skip
        if outcome in (messages.FAILED, messages.TIMED_OUT):  # timed out: an async handler's coroutine
            log.warning("dbworker worker %s: handler failed for item %r: %s%s",
                        name, sid, report.error if outcome == messages.TIMED_OUT else report.summary,
                        _trace(report))  # fmt: skip
        elif outcome == messages.LOST:
            log.warning("dbworker worker %s: lost the claim of item %r before its commit; result discarded",
                        name, sid)  # fmt: skip
        elif outcome == messages.DELETED:
            log.info("dbworker worker %s: the source row of item %r was deleted while its handler ran; "
                     "result discarded", name, sid)  # fmt: skip
        elif outcome == messages.RETRY:
            log.warning("dbworker worker %s: database error in the handler process for item %r: %s; "
                        "the claim is given back", name, sid, report.summary)  # fmt: skip
            self._ctx.observer.db_error(name, operation="complete", error=RuntimeError(report.summary))
            self.give_back(ev.claim)
        self._ctx.observer.executed(name, outcome=Outcome(outcome).observed, seconds=report.seconds)
        self._active()
        if outcome in (messages.FINISHED, messages.FAILED, messages.TIMED_OUT):
            self._picker.ended(sid)
        if outcome in (messages.FINISHED, messages.UNFINISHED, messages.FAILED, messages.TIMED_OUT):
            self._on_item_done(name, sid)

    def _died(self, ev: Died) -> None:
        name = self._ctx.worker.name
        if ev.pending is not None:
            self.give_back(ev.pending)  # handed over behind the item that ended the process
        if ev.claim is None:
            if ev.before_ready:
                log.error("dbworker worker %s: a handler process %s before it was ready; starting another",
                          name, describe_exit(ev.exitcode))  # fmt: skip
            return
        if ev.ended is Outcome.ABORTED:
            # Ended by a stop deadline: given back without counting, so a deploy never uses
            # up an item's attempts.
            with self._ending(ev.claim, messages.ABORTED.value, event=tracing.GIVEN_BACK):
                self.give_back(ev.claim)
            self._ctx.observer.executed(name, outcome=messages.ABORTED, seconds=None)
        elif ev.ended is Outcome.LOST:
            # Cancelled or taken over: the record is someone else's now; the writes rolled back.
            self._end_span(ev.claim, messages.LOST.value, "the claim is no longer ours (cancelled or taken over)",
                           event=tracing.CANCELLED)  # fmt: skip
            self._ctx.observer.executed(name, outcome=messages.LOST, seconds=None)
        else:
            if ev.ended is Outcome.TIMED_OUT:
                error, final = f"handler timed out after {self._ctx.worker.timeout:g} s", Outcome.TIMED_OUT
            else:
                error, final = f"handler process died: {describe_exit(ev.exitcode)}", Outcome.CRASHED
            spans = self._ctx.spans
            if spans is not None and final is Outcome.TIMED_OUT:
                spans.event(ev.claim.token, tracing.TIMED_OUT)
            outcome = self._attempt_failed(ev.claim, error, final, since=ev.since)
            self._end_span(ev.claim, outcome.value, error)
            self._ctx.observer.executed(name, outcome=outcome, seconds=None)
        self._active()

    def _active(self) -> None:
        self._ctx.observer.active(self._ctx.worker.name, running=self._runner.running())

    def _attempt_failed(self, claim: items.Claim, error: str, final: Outcome, *, since: float | None) -> Outcome:
        """Record an attempt whose process ended with the item (died, timed out): retried if
        the worker's Retry allows, else failed. Returns ``Outcome.RETRIED``, ``final`` (crashed,
        timed_out) or ``LOST``; ``final`` too when the database could not be reached.
        """
        w = self._ctx.worker
        started = None if since is None else history.utcnow() - dt.timedelta(seconds=time.monotonic() - since)
        kept = history.history_table(w.table) if self._ctx.settings.history_attempts else None
        # Its process span died with the process: the claim span's ids stand for the attempt.
        record = history.Attempt(kept, started, claimer.identity(), trace=tracing.ids_of(claim.trace))
        try:
            with connect(self._ctx.engine) as conn:
                outcome, after = failures.failed_attempt(conn, w.table, claim, error=error, retry=w.retry, final=final,
                                                      attempt_record=record)  # fmt: skip
        except Exception as exc:
            self._ctx.db_error("complete", exc)
            return final
        if outcome is Outcome.RETRIED:
            log.warning("dbworker worker %s: item %r: %s; retried", w.name, claim.source_id, error)
            self._picker.wait_until(claim.source_id, after)
        else:
            log.warning("dbworker worker %s: item %r failed: %s", w.name, claim.source_id, error)
        return outcome

    def give_back(self, *given: items.Claim, started: bool = False) -> None:
        """Release claims so any process may take them now, and say so (PostgreSQL).

        Other pods' sweeps may have passed these items: the notification has them claimed
        by key at once instead of at the sweeps' next wraps. ``started``: their attempts count.
        """
        w = self._ctx.worker
        released = []
        for claim in given:
            self._end_span(claim, messages.ABORTED.value, event=tracing.GIVEN_BACK)
            self._picker.claimable_again(claim.source_id)
            try:
                with connect(self._ctx.engine) as conn:
                    if items.give_back(conn, w.table, claim, started=started):
                        released.append(claim.source_id)
            except Exception as exc:
                self._ctx.db_error("complete", exc)
        if released:
            try:
                with connect(self._ctx.engine) as conn:
                    notify.announce_rows(conn, w.key.table.name, released)
                    conn.commit()
            except Exception as exc:
                self._ctx.db_error("complete", exc)


def _trace(report: messages.Report) -> str:
    """The handler's traceback (masked in the handler process) as the end of a log record."""
    return f"\n{report.traceback.rstrip()}" if report.traceback else ""
