"""The parent/child pipe protocol and the outcome names everyone shares.

The pool sends ``run``, ``cancel`` and ``STOP`` to a handler process; the process answers
``ready``, ``skipped`` and ``done`` (with a ``Report``); async handler processes take
``runs`` and answer ``dones`` (lists of the same). Outcome names are what a handler
process reports (``REPORTED``) and what observers and metrics see (``OUTCOMES``). Plain
data only: both sides of the pipe and the metrics import this, and it imports nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

# Parent to child: ("run", source_id, token, traceparent), ("cancel", token), and STOP to exit.
RUN = "run"
CANCEL = "cancel"
STOP = None
# Child to parent: ("ready",), ("skipped", token), ("done", Report), and from async handler
# processes ("health", worst loop lag in seconds, items in flight, token of the item whose
# coroutine held the loop or None) every second.
READY = "ready"
SKIPPED = "skipped"
DONE = "done"
HEALTH = "health"
# Async handler processes, batched: ("runs", [(source_id, token, traceparent), ...]) from
# the pool, ("dones", [Report, ...]) back: one pipe message for what one dispatch hands
# over, and for what one turn of the event loop finished.
RUNS = "runs"
DONES = "dones"



class Outcome(enum.StrEnum):
    """How one execution of an item ended: the one vocabulary of handler processes, the
    pool, the engine, observers and metrics (a member is its label value).

    The item's state after each (``sql.items`` makes the change): finished: FINISHED;
    unfinished: UNFINISHED (``Unfinished()``, maybe after a wait); failed, crashed (its
    process died with it), timed_out (it ran past the worker's timeout): FAILED; retried
    (an attempt failed and the worker's Retry gives it another): UNFINISHED after the
    retry's delay; aborted (ended at a stop deadline), retry (a transient database error
    kept the result from being committed): given back, UNFINISHED at once; lost (the claim
    was no longer ours at the commit, or was cancelled or taken over): the record is
    someone else's, nothing is written; deleted (the source row was deleted while its
    handler ran, its work record with it): the result is discarded, nothing is written.
    """

    FINISHED = "finished"
    UNFINISHED = "unfinished"
    FAILED = "failed"
    LOST = "lost"
    RETRY = "retry"
    RETRIED = "retried"
    CRASHED = "crashed"
    ABORTED = "aborted"
    TIMED_OUT = "timed_out"
    DELETED = "deleted"

    @property
    def observed(self) -> Outcome:
        """The outcome observers see: ``retry`` is given back without running, so ``lost``."""
        return Outcome.LOST if self is Outcome.RETRY else self


FINISHED, UNFINISHED, FAILED, LOST, RETRY = (Outcome.FINISHED, Outcome.UNFINISHED, Outcome.FAILED,
                                             Outcome.LOST, Outcome.RETRY)  # fmt: skip
RETRIED, CRASHED, ABORTED, TIMED_OUT = Outcome.RETRIED, Outcome.CRASHED, Outcome.ABORTED, Outcome.TIMED_OUT
DELETED = Outcome.DELETED
# What a handler process reports for one item (the others only the coordinator knows; an
# async handler process cancels a coroutine past its timeout itself: timed_out).
REPORTED = (FINISHED, UNFINISHED, FAILED, LOST, RETRY, RETRIED, DELETED, TIMED_OUT)
# Execution outcomes as observers see them (and metric label values). Final failures are
# failed, crashed and timed_out; retried attempts are not failures of the item.
OUTCOMES = (FINISHED, UNFINISHED, FAILED, CRASHED, LOST, ABORTED, RETRIED, TIMED_OUT, DELETED)
# What ends a busy handler process early, besides its own death: the pool ends it for one of these.
ENDED_BY_POOL = (ABORTED, TIMED_OUT, LOST)


@dataclass(frozen=True)
class Report:
    """A handler process's answer for one item."""

    source_id: Any
    token: str
    outcome: Outcome  # one of REPORTED
    seconds: float
    error: str | None = None  # the exception's text, for the work record's error
    summary: str = ""  # one line, for logs
    traceback: str | None = None  # the whole traceback (masked), for the record and the log
    after: float | None = None  # unfinished or retried: seconds before it is claimable again


def run(source_id: Any, token: str, trace: str | None = None) -> tuple[str, Any, str, str | None]:
    """``trace``: the traceparent of the coordinator's span of the claim (tracing on)."""
    return (RUN, source_id, token, trace)


def cancel(token: str) -> tuple[str, str]:
    return (CANCEL, token)
