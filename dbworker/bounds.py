"""The upper bound of every number a user gives dbworker, and the one check of it.

A number past what the databases' datetime types, Python's ``datetime``/``timedelta`` or the
OS's timeouts can hold fails far from where it was given (a retry that never ends, a lease
thread that dies, a lookup failing every second). So each entry point (the contract's
``Unfinished``, ``Retry``, registration, the coordinator's settings, the command's flags and
variables) checks its numbers here, and the error names the field, the bound and the fix.
The reasons for each bound are docs/bounds.md's. Nothing here imports the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_SECONDS = 86_400
YEAR_SECONDS = 365 * DAY_SECONDS


@dataclass(frozen=True)
class Bound:
    """The largest value a kind of number may take, and what to do instead."""

    maximum: float
    unit: str  # "seconds" or "" (a count)
    shown: str  # the maximum in words, e.g. "10 years"
    fix: str


# Waits that end in a stored time (``not_before = now + wait``) or a deadline: Unfinished(after=),
# Retry(delay=, max_delay=), a handler's timeout, a periodic worker's every= and retention=.
# Ten years from now stays far inside every database's datetime range (MariaDB's DATETIME ends
# at 9999) and Python's, whatever the clock says.
WAIT = Bound(10 * YEAR_SECONDS, "seconds", "10 years",
             "keep the row out of the eligible query until it is due instead")  # fmt: skip
# Cadences of a running pod: the lease, the poll waits, the drain and the backlog sampling. A
# lease is renewed every third of it; one day is already far longer than any sane setting,
# and well inside threading's TIMEOUT_MAX and every datetime type.
SETTING = Bound(DAY_SECONDS, "seconds", "1 day", "use a shorter period")
# Handler processes of one worker in one pod.
CONCURRENCY = Bound(1024, "", "1024", "run more pods instead")
# Attempts of one item: the work table's ``attempts`` column is a 32-bit INTEGER everywhere.
ATTEMPTS = Bound(2**31 - 1, "", "2147483647 (a 32-bit INTEGER column)", "use fewer attempts")


def exceeds(value: float, bound: Bound) -> bool:
    """Whether ``value`` is over ``bound`` (NaN counts as over: it compares as nothing)."""
    return not value <= bound.maximum


def message(field: str, value: object, bound: Bound) -> str:
    """The error for ``value`` of ``field`` over ``bound``: field, bound and fix."""
    unit = f" {bound.unit}" if bound.unit else ""
    return f"{field} must be at most {bound.maximum:g}{unit} ({bound.shown}), got {value!r}; {bound.fix}"


def check(value: float, bound: Bound, *, field: str) -> None:
    """``ValueError`` naming ``field``, the bound and the fix when ``value`` is over ``bound``."""
    if exceeds(value, bound):
        raise ValueError(message(field, value, bound))
