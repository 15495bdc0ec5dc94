"""Retry policy: which failed attempts are tried again, and how long an item waits before it.

Pure: no database, no clock. The handler process and the loop ask it, with the attempt's
number and a random draw, and write what it answers (``UNFINISHED`` with a not-before
time, or ``FAILED``) with the same fenced commit as every outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dbworker import bounds


def _number(value: object, name: str, *, minimum: float, strict: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not ok or (value <= minimum if strict else value < minimum):  # type: ignore[operator]
        rule = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ValueError(f"Retry({name}=...) must be a number {rule}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Retry:
    """How a worker retries failed attempts (``transactional_worker(retry=Retry(...))``).

    ``max_attempts`` (>= 1) counts every attempt, the first included. A failed attempt is an
    exception that is an instance of a class in ``on``, the handler process dying, or a
    timeout. While attempts remain the item waits ``delay * backoff ** (attempt - 1)``
    seconds, at most ``max_delay``, then +- ``jitter`` as a fraction of that, on the
    database's clock; then it is claimable again. ``delay`` and ``max_delay`` are at most
    ``bounds.WAIT`` (10 years). Bad arguments raise ``ValueError``.
    """

    max_attempts: int
    delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.0
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Retry(max_attempts=...) must be an integer >= 1, got {n!r}")
        bounds.check(n, bounds.ATTEMPTS, field="Retry(max_attempts=...)")
        bounds.check(_number(self.delay, "delay", minimum=0), bounds.WAIT, field="Retry(delay=...)")
        _number(self.backoff, "backoff", minimum=1)
        bounds.check(_number(self.max_delay, "max_delay", minimum=0), bounds.WAIT, field="Retry(max_delay=...)")
        _number(self.jitter, "jitter", minimum=0)
        if self.jitter > 1:
            raise ValueError(f"Retry(jitter=...) is a fraction of the delay, from 0 to 1, got {self.jitter!r}")
        on: Any = self.on
        if isinstance(on, type):
            on = (on,)
        if not isinstance(on, tuple) or not on or not all(isinstance(c, type) and issubclass(c, BaseException) for c in on):
            raise ValueError(f"Retry(on=...) must be exception classes, e.g. (OSError,), got {self.on!r}")
        object.__setattr__(self, "on", on)

    def retries(self, exc: BaseException | None) -> bool:
        """Whether a failure by ``exc`` may be retried (None: the process died or timed out)."""
        return exc is None or isinstance(exc, self.on)

    def wait(self, attempt: int, draw: float = 0.5) -> float:
        """Seconds before attempt ``attempt + 1``, after attempt ``attempt`` (1-based) failed.

        ``draw`` is uniform in [0, 1): 0.5 gives the delay without jitter.
        """
        try:
            grown = self.delay * self.backoff ** max(0, attempt - 1)
        except OverflowError:  # thousands of attempts: the cap applies
            grown = self.max_delay
        base = min(self.max_delay, grown)
        return max(0.0, base * (1 + self.jitter * (2 * draw - 1)))


def decide(retry: Retry | None, *, attempt: int, exc: BaseException | None, draw: float) -> float | None:
    """After attempt ``attempt`` failed (by ``exc``, or None when the process died or timed
    out): the seconds to wait before the next attempt, or None when the item fails now.
    """
    if retry is None or attempt >= retry.max_attempts or not retry.retries(exc):
        return None
    return retry.wait(attempt, draw)
