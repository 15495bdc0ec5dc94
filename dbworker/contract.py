"""The contract types applications import: outcomes, execution statuses, callback shapes.

Everything here is part of the public API in docs/contract.md and never changes meaning; the rest of
the package builds on these names and nothing here imports the rest of the package.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from sqlalchemy import Select
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

from dbworker import bounds


@dataclass(frozen=True)
class Finished:
    """The work item is complete; it will not be claimed again."""


@dataclass(frozen=True)
class Unfinished:
    """This call is done and more work remains: the item may be claimed again when eligible.

    ``after`` (seconds, or a ``timedelta``): not claimable again before that much time has
    passed on the database's clock, at most ``bounds.WAIT`` (10 years). ``Unfinished()`` may
    be claimed again at once.
    """

    after: float | dt.timedelta | None = None

    def __post_init__(self) -> None:
        after = self.after
        if isinstance(after, dt.timedelta):
            after = after.total_seconds()
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after) or after < 0
        ):
            raise ValueError(
                f"Unfinished(after=...) must be seconds >= 0 or a timedelta, got {self.after!r}"
            )
        if after is not None and bounds.exceeds(after, bounds.WAIT):
            raise ValueError(bounds.message("Unfinished(after=...)", self.after, bounds.WAIT))

    @property
    def after_seconds(self) -> float | None:
        """``after`` in seconds (None: claimable again at once)."""
        if isinstance(self.after, dt.timedelta):
            return self.after.total_seconds()
        return None if self.after is None else float(self.after)


Outcome: TypeAlias = Finished | Unfinished


class ExecutionStatus(enum.StrEnum):
    """A work item's recorded status, stored as its value in the ``<name>_work`` table."""

    WORKING = "working"
    UNFINISHED = "unfinished"
    FINISHED = "finished"
    FAILED = "failed"


class LostClaim(RuntimeError):
    """The item's claim is no longer this process's (its lease expired and another took it,
    or it was cancelled): the handler's writes were rolled back and its result discarded.
    """


def now() -> dt.datetime:
    """The current time as dbworker stores it: naive UTC."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Handler(Protocol):
    """``handler(source, session) -> Outcome``, run in a child process."""

    def __call__(self, source: Any, session: Session, /) -> Outcome: ...


class AsyncHandler(Protocol):
    """``async def handler(source, session) -> Outcome``: a coroutine on a handler process's
    event loop, with an ``AsyncSession`` (docs/async.md)."""

    def __call__(self, source: Any, session: AsyncSession, /) -> Awaitable[Outcome]: ...


class Eligible(Protocol):
    """A zero-argument callable returning a ``select()`` over the worker's source."""

    def __call__(self) -> Select[Any]: ...
