"""The contract types applications import: outcomes, execution statuses, callback shapes.

Everything here is part of the public API in SPEC.md and never changes meaning; the rest of
the package builds on these names and nothing here imports the rest of the package.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from sqlalchemy import Select
from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Finished:
    """The work item is complete; it will not be claimed again."""


@dataclass(frozen=True)
class Unfinished:
    """This call is done and more work remains: the item may be claimed again when eligible."""


Outcome: TypeAlias = Finished | Unfinished


class ExecutionStatus(enum.StrEnum):
    """A work item's recorded status, stored as its value in the ``<name>_work`` table."""

    WORKING = "working"
    UNFINISHED = "unfinished"
    FINISHED = "finished"
    FAILED = "failed"


class Handler(Protocol):
    """``handler(source, session) -> Outcome``, run in a child process."""

    def __call__(self, source: Any, session: Session, /) -> Outcome: ...


class Eligible(Protocol):
    """A zero-argument callable returning a ``select()`` over the worker's source."""

    def __call__(self) -> Select[Any]: ...
