"""The one backoff: doubling waits with a ceiling, for empty polls and for database errors."""

from __future__ import annotations

import random


class Backoff:
    """Waits that start at ``first`` and double up to ``maximum``; ``reset()`` starts over.

    ``jitter`` (0..1) scales each wait down by a random fraction, so many pods retrying
    after the same outage do not hit the server in step.
    """

    def __init__(self, first: float, maximum: float, *, factor: float = 2.0, jitter: float = 0.0) -> None:
        self.first = first
        self.maximum = max(first, maximum)
        self.factor = factor
        self.jitter = jitter
        self._current = first

    def next(self) -> float:
        """The wait to use now; the following one is longer, up to the ceiling."""
        wait = self._current
        self._current = min(self._current * self.factor, self.maximum)
        if self.jitter:
            wait *= 1.0 - random.uniform(0.0, self.jitter)
        return wait

    def reset(self) -> None:
        self._current = self.first
