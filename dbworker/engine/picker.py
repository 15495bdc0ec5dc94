"""Which rows a worker's next claim takes: the sweep, rows named by wake-ups, waiting items.

Pure and thread-safe: wake-ups and ended items arrive from other threads, and nothing here
reads the database. What the fetch reads (the fleet's wrap, the lookup of waiting items and
of the pause) is handed in; ``plan`` says what the next claim does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dbworker.engine.waiting import WaitingItems
from dbworker.sweep import Sweep


@dataclass(frozen=True)
class Plan:
    """What a claim does first: claim the ``named`` rows by key, then the sweep's rounds as
    long as it wants more; ``unnamed``: a wake-up named no row (it may lie behind the
    cursor); ``wrapping``: the sweep's round starts from the first row."""

    named: list[Any]
    unnamed: bool
    wrapping: bool


@dataclass(frozen=True)
class Lookup:
    """What the periodic lookup read: the pause, waiting items (key, seconds until due) and
    items whose claims expired (their processes died)."""

    paused: bool
    waiting: list[tuple[Any, float]]
    expired: list[Any] = field(default_factory=list)


class Picker:
    """The claim policy of one worker's loop around its ``Sweep``."""

    def __init__(self, sweep: Sweep, *, lookup_every: float) -> None:
        self.sweep = sweep
        self.waiting = WaitingItems()
        self.paused = False  # the worker is paused fleet-wide (sql/pauses.py): no claims
        self._lookup_every = lookup_every
        self._lookup_at = 0.0

    # --- what wake-ups and outcomes tell it (any thread) ---------------------------------
    def wake(self, keys: tuple[str, ...], *, again: bool) -> None:
        self.sweep.wake(keys, again=again)

    def claimable_again(self, source_id: Any) -> None:
        """Claim ``source_id`` by key in the next claim (given back, expired, due)."""
        self.sweep.claimable_again(source_id)

    def ended(self, source_id: Any) -> None:
        self.sweep.ended(source_id)

    def wait_until(self, source_id: Any, seconds: float | None) -> None:
        """Claim ``source_id`` by key once ``seconds`` have passed (None or <= 0: at once)."""
        if seconds is None or seconds <= 0:
            self.sweep.claimable_again(source_id)
            return
        now = time.monotonic()
        self.waiting.add(source_id, now + seconds, now=now)

    # --- the loop's thread -----------------------------------------------------------------
    def take_due(self, now: float) -> float | None:
        """Name the waiting items now due for the next claim; return when the next one is due
        (``now`` when some just were; None: none waits)."""
        due, soonest = self.waiting.take_due(now)
        for source_id in due:
            self.sweep.claimable_again(source_id)
        return now if due else soonest

    def lookup_due(self, now: float) -> bool:
        """Whether the periodic lookup runs now (then the next is scheduled)."""
        if now < self._lookup_at:
            return False
        self._lookup_at = now + self._lookup_every
        return True

    @property
    def lookup_at(self) -> float:
        return self._lookup_at

    @property
    def lookup_window(self) -> float:
        """How far past due a waiting item the lookup still reads (the sweep finds the rest)."""
        return 2 * self._lookup_every

    def looked_up(self, found: Lookup) -> bool | None:
        """What the lookup read: wait for each waiting item, name each expired one for the
        next claim (which the loop makes at once); the new pause state when it changed
        (None: unchanged)."""
        for source_id, seconds in found.waiting:
            self.wait_until(source_id, seconds)
        for source_id in found.expired:
            self.claimable_again(source_id)
        if found.paused == self.paused:
            return None
        self.paused = found.paused
        return found.paused

    def begin(self, now: float) -> bool:
        """A claim starts at ``now`` (monotonic); True: ask the fleet whose wrap is due and
        tell ``sweep.turn`` the answer before ``plan``."""
        return self.sweep.begin(now)

    def plan(self) -> Plan:
        """What the claim takes first (named rows are taken from the sweep: a claim that
        fails puts them back, ``put_back``)."""
        named, unnamed = self.sweep.take_named()
        return Plan(named, unnamed, self.sweep.wrapping)

    def put_back(self, plan: Plan) -> None:
        """A claim of ``plan`` failed (the database was away): its rows are named again."""
        self.sweep.put_back(plan.named, unnamed=plan.unnamed)
