"""The parent/child pipe protocol and the outcome names everyone shares.

The pool sends ``run``, ``cancel`` and ``STOP`` to a handler process; the process answers
``ready``, ``skipped`` and ``done`` (with a ``Report``). Outcome names are what a handler
process reports (``REPORTED``) and what observers and metrics see (``OUTCOMES``). Plain
data only: both sides of the pipe and the metrics import this, and it imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Parent to child: ("run", source_id, token), ("cancel", token), and STOP to exit.
RUN = "run"
CANCEL = "cancel"
STOP = None
# Child to parent: ("ready",), ("skipped", token), ("done", Report).
READY = "ready"
SKIPPED = "skipped"
DONE = "done"

# What a handler process reports for one item. "lost": the claim was no longer current at
# the commit (result discarded); "retry": a transient database error kept the result from
# being committed, so the coordinator gives the claim back.
FINISHED, UNFINISHED, FAILED, LOST, RETRY = "finished", "unfinished", "failed", "lost", "retry"
RETRIED = "retried"
REPORTED = (FINISHED, UNFINISHED, FAILED, LOST, RETRY, RETRIED)
# What the coordinator itself decides: the process died with the item ("crashed"), the
# coordinator ended it at a stop deadline and gave the claim back ("aborted"), or it ran
# past the worker's timeout and failed ("timed_out"). "retried" (also reported by handler
# processes): an attempt failed and the worker's Retry gives the item another.
CRASHED, ABORTED, TIMED_OUT = "crashed", "aborted", "timed_out"
# Execution outcomes as observers see them (and metric label values). Final failures are
# failed, crashed and timed_out; retried attempts are not failures of the item.
OUTCOMES = (FINISHED, UNFINISHED, FAILED, CRASHED, LOST, ABORTED, RETRIED, TIMED_OUT)


@dataclass(frozen=True)
class Report:
    """A handler process's answer for one item."""

    source_id: Any
    token: str
    outcome: str  # one of REPORTED
    seconds: float
    error: str | None = None  # the exception's text, for the work record's error
    summary: str = ""  # one line, for logs
    traceback: str | None = None  # the whole traceback (masked), for the record and the log
    after: float | None = None  # unfinished or retried: seconds before it is claimable again


def run(source_id: Any, token: str) -> tuple[str, Any, str]:
    return (RUN, source_id, token)


def cancel(token: str) -> tuple[str, str]:
    return (CANCEL, token)
