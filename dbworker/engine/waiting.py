"""Items of one worker waiting for a time (a retry delay, ``Unfinished(after=)``).

Pure bookkeeping, thread-safe: times are monotonic seconds; each key keeps its earliest
time. Ours are known when they end; others' (another pod's, or from before a restart) come
from the picker's periodic lookup. Each is claimed by key once due.
"""

from __future__ import annotations

import heapq
import threading
from typing import Any


class WaitingItems:
    """A heap of (when, key) with each key's earliest time."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, Any]] = []
        self._when: dict[Any, float] = {}
        self._lock = threading.Lock()

    def add(self, source_id: Any, when: float, *, now: float) -> None:
        """Wait for ``source_id`` until ``when``, unless it already waits until then (the
        lookup finds our own waiting items too)."""
        with self._lock:
            known = self._when.get(source_id)
            if known is not None and now < known <= when + 0.001:
                return
            self._when[source_id] = when
            heapq.heappush(self._heap, (when, source_id))

    def take_due(self, now: float) -> tuple[list[Any], float | None]:
        """The keys due at ``now`` (taken), and when the next is due (None: none waits)."""
        due: list[Any] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                when, source_id = heapq.heappop(self._heap)
                if self._when.get(source_id) == when:  # else a later add replaced it
                    del self._when[source_id]
                    due.append(source_id)
            return due, self._heap[0][0] if self._heap else None
