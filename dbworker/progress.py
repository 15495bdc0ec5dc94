"""``dbworker.report_progress()``: a running handler says how far it got.

The handler process's runner installs the attempt being run (``running``); a report is
checked here and written by ``sql.progress`` on a short connection of its own, fenced on
the claim. The current attempt is a context variable: a sync handler's process sets it per
item, an async handler's sets it inside each item's task (and the tasks it starts copy it),
so concurrent coroutines each report for their own item. An async item's reports go
through ``Coalesced``: noted at once, written by a task of their own, never blocking the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Iterator

# Writes one checked report (fraction, note) for the attempt that runs now.
Writer = Callable[[float | None, str | None], None]
_current: contextvars.ContextVar[Writer | None] = contextvars.ContextVar("dbworker_progress", default=None)


def check(fraction: object, note: object) -> tuple[float | None, str | None]:
    """The report as stored; ``ValueError`` naming the field that is wrong."""
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not math.isfinite(fraction) \
                or not 0.0 <= fraction <= 1.0:  # fmt: skip
            raise ValueError(f"fraction must be a number from 0 to 1 (or None), got {fraction!r}")
        fraction = float(fraction)
    if note is not None and not isinstance(note, str):
        raise ValueError(f"note must be a string (or None), got {type(note).__name__}")
    if fraction is None and note is None:
        raise ValueError("fraction and note are both None: give a fraction from 0 to 1, a note, or both")
    return fraction, note


def report_progress(fraction: float | None = None, note: str | None = None) -> None:
    """Record how far the running handler got: ``fraction`` from 0 to 1 and/or a short
    ``note`` (cut to 200 characters). Seen at once by ``state()["progress"]``, ``dbworker
    inspect`` and the console, whatever the handler's transaction does later; ignored once
    the item's claim is lost. One short UPDATE on a connection of its own: call it every
    second or so, not per row. ``ValueError`` for a bad argument; ``RuntimeError`` outside
    a handler run by dbworker.
    """
    checked = check(fraction, note)
    writer = _current.get()
    if writer is None:
        raise RuntimeError(
            "dbworker.report_progress() was called outside a handler: only a handler that "
            "dbworker runs for an item can report its progress"
        )
    writer(*checked)


@contextlib.contextmanager
def running(writer: Writer) -> Iterator[None]:
    """Reports made inside go to ``writer`` (the handler process's runner, for one attempt)."""
    token = _current.set(writer)
    try:
        yield
    finally:
        _current.reset(token)


class Coalesced:
    """The ``Writer`` of one async item: a report (from the item's task, or a thread it
    started) is only noted; one task at a time writes the newest with ``write``, so reports
    made faster than the database answers cost one write each round trip, in order, and the
    event loop never waits. ``flush()`` (before the outcome is recorded) waits for the last
    one; ``drop()`` (the claim was lost) forgets what is left. Made on the item's loop."""

    def __init__(self, write: Callable[[float | None, str | None], Awaitable[None]]) -> None:
        self._write = write
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._latest: tuple[float | None, str | None] | None = None
        self._task: asyncio.Task[None] | None = None

    def __call__(self, fraction: float | None, note: str | None) -> None:
        self._latest = (fraction, note)
        if threading.get_ident() == self._thread:
            self._kick()
        else:
            self._loop.call_soon_threadsafe(self._kick)

    def _kick(self) -> None:
        if self._latest is not None and (self._task is None or self._task.done()):
            self._task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        while (report := self._latest) is not None:
            self._latest = None
            await self._write(*report)

    async def flush(self) -> None:
        self._kick()
        if self._task is not None:
            await asyncio.shield(self._task)

    def drop(self) -> None:
        self._latest = None  # a write under way ends by itself (fenced: it changes nothing)


def not_recorded(worker: str, source_id: object, why: str) -> None:
    """Log a report that could not be written (``why``: already masked)."""
    logging.getLogger("dbworker").warning("dbworker worker %s: progress of item %r not recorded: %s",
                                          worker, source_id, why)  # fmt: skip
