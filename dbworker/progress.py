"""``dbworker.report_progress()``: a running handler says how far it got.

The handler process's runner installs the attempt being run (``running``); a report is
checked here and written by ``sql.progress`` on a short connection of its own, fenced on
the claim. Sync handlers call it directly; the current attempt is a context variable, so
an async handler's tasks (which copy the context) will see it too.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator

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
