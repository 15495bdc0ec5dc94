"""The event-loop watchdog of an async handler process: how late the loop runs, seen from a
thread of its own, so a coroutine that blocks the loop (a blocking call inside ``async def``)
is measured while it blocks.

A beat coroutine stamps the time every ``LOOP_BEAT_SECONDS``; the thread reads the stamp's
age. Every ``LOOP_REPORT_SECONDS`` it reports the worst lag seen, the items in flight and,
past ``LOOP_BLOCKED_SECONDS``, the task that held the loop (the pool turns that into metrics
and a warning naming the handler and item). Replacing a blocked process is the pool's job.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from dbworker.tuning import LOOP_BEAT_SECONDS, LOOP_BLOCKED_SECONDS, LOOP_REPORT_SECONDS


def lag(now: float, last_beat: float) -> float:
    """Seconds the loop is late: the beat's age beyond the beat interval (never negative)."""
    return max(0.0, now - last_beat - LOOP_BEAT_SECONDS)


class LoopWatch:
    """Measures ``loop``'s lag; ``report(worst_lag, in_flight, blocker)`` runs on the watch
    thread (``blocker``: the name of the task that ran while the loop was late, or None)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, in_flight: Callable[[], int],
                 report: Callable[[float, int, str | None], None]) -> None:  # fmt: skip
        self._loop = loop
        self._in_flight = in_flight
        self._report = report
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dbworker-loopwatch", daemon=True)

    async def beat(self) -> None:
        """Runs on the loop for the process's life."""
        while True:
            self._last = time.monotonic()
            await asyncio.sleep(LOOP_BEAT_SECONDS)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        worst, blocker, next_report = 0.0, None, time.monotonic() + LOOP_REPORT_SECONDS
        while not self._stop.wait(LOOP_BEAT_SECONDS):
            now = time.monotonic()
            late = lag(now, self._last)
            if late >= LOOP_BLOCKED_SECONDS:  # the task running now is the one holding the loop
                task = asyncio.current_task(self._loop)
                blocker = task.get_name() if task is not None else blocker
            worst = max(worst, late)
            if now >= next_report:
                self._report(worst, self._in_flight(), blocker)
                worst, blocker, next_report = 0.0, None, now + LOOP_REPORT_SECONDS
