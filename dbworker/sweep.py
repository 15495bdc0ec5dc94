"""Where a worker's next claim looks: the key-order sweep, its wraps, and rows named by key.

Pure policy for one claim loop, no database: the engine's fetch asks what to claim, runs the
SQL (``sql.claims``), reads what a decision needs (``needs_lowest``, ``needs_top``,
``needs_top_to_resume``) and tells the sweep what it saw (``saw``, ``turn``, ``ready_again``). A worker whose eligible query has
no order of its own is swept in key order from a cursor, so finished history below the
cursor is not walked again; the cursor wraps to the start now and then (lower keys may be
claimable again). Rows named by wake-ups or made claimable again are claimed by key,
wherever the cursor stands. Thread-safe: wake-ups arrive from other threads.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dbworker.sql import notify, sweeps
from dbworker.sql.claims import Round
from dbworker.tuning import (
    COLD_WRAP_SPACING_MAX,
    FED_WRAP_POLLS,
    FED_WRAP_SPACING,
    RECENT_ENDED,
    WRAP_SPACING,
)


@dataclass(frozen=True)
class Position:
    """Where a sweep round starts: after ``cursor`` (None: from the first row), or at it
    (``inclusive``)."""

    cursor: Any
    inclusive: bool = False


class Sweep:
    """The sweep state of one worker's claim loop.

    ``keys_as_text``: rows are named by their keys' text form (PostgreSQL, where claims
    take rows by that form and notifications carry it), else by their values.
    ``max_poll_seconds``: the longest a wrap, or a look for expired claims, waits;
    ``lease_seconds``: expired claims are looked for at least every third of it.
    ``shares_source``: another registered worker claims rows of the same source table, so
    a round may skip rows that worker's claim holds for a moment (see ``saw``).
    """

    def __init__(self, *, keys_as_text: bool, max_poll_seconds: float, lease_seconds: float | None = None,
                 parse_key: Callable[[str], Any] | None = None, fed: bool = False,
                 shares_source: bool = False, marked: bool = False) -> None:  # fmt: skip
        self.keys_as_text = keys_as_text
        # A worker with limits: its rounds read from the worker's mark, not from this cursor
        # (sql/turns.py), so named rows are always claimed by key (one may lie below the mark).
        self.marked = marked
        self.fed = fed  # the source has the wake-up triggers (see FED_WRAP_SPACING)
        self.shares_source = shares_source
        # The last sweep round (``_swept_locked``), or the last claim's round by key
        # (``_named_locked``), skipped rows another transaction had locked (SKIP LOCKED):
        # they are claimable once it ends, so the engine claims again soon (skipped_locked).
        self._swept_locked = False
        self._named_locked = False
        self._fleet_wrap = False  # this loop won the fleet's wrap (sql.sweeps): record it
        # Elsewhere, a wake-up's key texts (the change table's) as claims take keys; None
        # for a text it cannot read (that wake-up names no row).
        self._parse_key = parse_key
        self._max_poll = max_poll_seconds
        self._lock = threading.Lock()
        # The cursor: the last key the sweep saw; None means the next round starts a wrap.
        self.cursor: Any = None
        self.inclusive = False  # the next round starts at the cursor's key, not after it
        self._wrap_at = 0.0  # when the next periodic wrap is due (see begin and turn)
        self._spacing = 0.0
        self._started = False  # a first claim was made (or asked the fleet)
        # Between wraps, expired claims (a dead process's items) are looked up through the
        # lease index and claimed by key: wraps may be far apart. Every third of a lease (its
        # holder renews it that often, so a dead one's expires within a lease), at most
        # max_poll_seconds apart: an item is taken over within about 4/3 of a lease of its
        # holder's death, however long the polls.
        self._expired_at = 0.0
        self._expired_every = max_poll_seconds if lease_seconds is None else min(max_poll_seconds, lease_seconds / 3)
        # Rows to claim by key: named by wake-ups, or our own items claimable again.
        self._named: set[Any] = set()
        self._many = False  # ... more than notify.MAX_NAMED_ROWS of them: sweep instead
        self._again: set[Any] = set()  # ... made claimable again (not handlers' own writes)
        # A wake-up that named no row (SQLite's commit watcher, a dependency on another row,
        # any wake-up off PostgreSQL): what changed may lie behind the cursor.
        self._unnamed = False
        self._wrap_allowed_at = 0.0  # ... when such a wake-up may wrap (see WRAP_SPACING)
        self._cold = True  # no wrap ran yet (see ``wrapped``)
        self._wrap_times: collections.deque[float] = collections.deque(maxlen=3)  # the last warm ones'
        self.wrap_owed = False  # ... one could not have it yet: due at wrap_allowed_at
        self._ended: collections.deque[Any] = collections.deque(maxlen=RECENT_ENDED)
        self._ended_set: set[Any] = set()

    # --- what wake-ups and outcomes tell it (any thread) ---------------------------------
    def wake(self, keys: Iterable[str] = (), *, again: bool = False) -> None:
        """A wake-up: ``keys`` name changed rows as text; ``again``: made claimable again.

        Keys are used only where claims take rows by their text form; otherwise (or with
        no keys) the wake-up names no row, and the next claim may look behind the cursor.
        """
        keys = list(keys)
        if keys and self.keys_as_text:
            for key in keys:
                self.name(key, again=again)
            return
        parsed = [self._parse_key(k) for k in keys] if keys and self._parse_key is not None else [None]
        if None not in parsed:
            for value in parsed:
                self.name(value, again=again)
            return
        with self._lock:
            self._unnamed = True

    def name(self, key: Any, *, again: bool = False) -> None:
        """Have the next claim take ``key``'s row by key (in ``claims.claim``'s form of keys)."""
        with self._lock:
            if len(self._named) < notify.MAX_NAMED_ROWS:
                self._named.add(key)
                if again:
                    self._again.add(key)
            else:
                self._many = True

    def claimable_again(self, source_id: Any) -> None:
        """An item that may be claimable again: ours that ended unfinished or was given back,
        or one whose claim expired.

        It is named for the next claim, wherever the cursor stands. Sweeping from the first
        row instead would walk the whole finished history once for every such item.
        """
        if not self.keys_as_text:
            self.name(source_id, again=True)  # not its handler's own write, if it ended here before
            return
        key = notify.key_text(source_id)
        if key is None:
            self.cursor = None  # no text form to name it by: the next claim sweeps from the start
            return
        self.name(key, again=True)

    def ended(self, source_id: Any) -> None:
        """An item of this loop finished or failed: later notifications of it are its own writes."""
        key = notify.key_text(source_id) if self.keys_as_text else source_id
        if key is None:
            return  # no text form to match notifications against
        with self._lock:
            if len(self._ended) == self._ended.maxlen:
                self._ended_set.discard(self._ended[0])
            self._ended.append(key)
            self._ended_set.add(key)

    # --- one claim, in the loop's thread -----------------------------------------------
    def begin(self, now: float) -> bool:
        """A claim starts at ``now`` (monotonic): wrap if a wake-up's wrap is owed and its
        spacing allows. True when a periodic wrap (or the first claim's) is due: the loop
        asks the fleet whose it is and tells ``turn`` the answer.
        """
        if self.wrap_owed and now >= self._wrap_allowed_at:
            self.cursor = None
            self._started = True
            return False
        if now < self._wrap_at:
            return False
        return self.cursor is not None or not self._started

    def turn(self, now: float, *, won: bool, due_in: float, low: Any = None, inclusive: bool = False,
             fleet: bool = True) -> None:  # fmt: skip
        """The fleet's answer to ``begin``: ``won``, wrap now; else the next periodic wrap is
        the fleet's, ``due_in`` seconds from now, and a first claim starts at ``low``, where
        the last wrap left off (None: unknown, so it wraps itself). ``fleet=False``: the
        fleet could not be asked (no table): the wrap is this loop's alone, not recorded.
        """
        first = not self._started
        self._started = True
        self._fleet_wrap = won and fleet
        if won:
            self.cursor = None
            return
        self._wrap_at = now + due_in
        if first:
            self.cursor = low
            self.inclusive = inclusive and low is not None

    @property
    def started(self) -> bool:
        """A first claim was made (or asked the fleet)."""
        return self._started

    @property
    def wrap_spacing(self) -> float:
        """Seconds from the end of the last wrap to the next periodic one."""
        return self._spacing

    @property
    def least_spacing(self) -> float:
        """The shortest spacing of periodic wraps (before their cost is known)."""
        return (FED_WRAP_POLLS if self.fed else 1) * self._max_poll

    @property
    def wrapping(self) -> bool:
        """The next sweep round starts from the first row."""
        return self.cursor is None

    def take_named(self) -> tuple[list[Any], bool]:
        """Named rows the sweep would not reach before its next wrap: to claim by key now;
        and whether a wake-up came that named no row.

        Rows past the cursor are left to the sweep (the usual insert of a new, higher key
        costs nothing extra). Too many named at once make this claim sweep from the start.
        """
        self._named_locked = False
        with self._lock:
            keys, many, again, unnamed = sorted(self._named), self._many, self._again, self._unnamed
            self._named, self._many, self._again, self._unnamed = set(), False, set(), False
            ended = set(self._ended_set)
        if self.marked:
            return [k for k in keys if k in again or k not in ended], unnamed
        if many:
            self.cursor = None
        cursor = self.cursor
        if cursor is None:
            return [], False  # this claim sweeps from the start: it reaches every row
        keys = [k for k in keys if k in again or k not in ended]
        if isinstance(cursor, int) and not isinstance(cursor, bool):
            keys = [k for k in keys if not (notify.int_past(k, cursor) if isinstance(k, str) else k > cursor)]
        return keys, unnamed

    def put_back(self, keys: Iterable[Any], *, unnamed: bool) -> None:
        """What ``take_named`` returned, for a claim that failed (the database was away):
        named again for the next claim, so an error does not leave them to the next wrap."""
        for key in keys:
            self.name(key, again=True)  # take_named has told them from handlers' own writes
        if unnamed:
            with self._lock:
                self._unnamed = True

    def left_by_full_round(self, named: Sequence[Any], taken: Iterable[Any]) -> None:
        """A round by key took as many rows as it could (its limit): the ``named`` rows it did
        not take (``taken``: the claimed items' keys) may simply not have fit, so they are
        named again for the next claim. Dropped, they would lie behind the cursor until the
        next wrap. (A round short of its limit took every named row that was claimable.)
        A limited worker's rounds lower its mark to the named rows they left: no need."""
        if self.marked:
            return
        got = {notify.key_text(t) for t in taken} if self.keys_as_text else set(taken)
        for key in named:
            if key not in got:
                self.name(key, again=True)  # take_named has told them from handlers' own writes

    def needs_named_claimable(self, named: Sequence[Any], taken: Sequence[Any], limit: int) -> bool:
        """Whether a round by key of ``named`` rows that took ``taken`` (source ids) under
        ``limit`` needs the read without locks of the named rows it left: a row another
        transaction held (SKIP LOCKED; a lock released without a write sends no wake-up)
        looks just like one not claimable. A full round left them for ``left_by_full_round``.
        A limited worker's rounds lock no rows (a named row left waits on a limit): never."""
        return not self.marked and len(taken) < min(limit, len(named))

    def left_locked(self, claimable: Iterable[Any]) -> None:
        """What ``needs_named_claimable`` had read: rows named by the last round by key that
        it did not take and that are claimable (values, as a read returns them). It skipped
        them because another transaction held them: named again, and the engine claims again
        soon (``skipped_locked``) until the holder ends. Dropped, a row behind the cursor
        would wait for the next wrap."""
        rows = [notify.key_text(v) for v in claimable] if self.keys_as_text else list(claimable)
        for key in rows:
            if key is not None:
                self.name(key, again=True)  # take_named has told them from handlers' own writes
                self._named_locked = True

    @property
    def skipped_locked(self) -> bool:
        """The last claim skipped claimable rows another transaction had locked (SKIP
        LOCKED), in its sweep round or its round by key: claim again soon."""
        return self._swept_locked or self._named_locked

    def wrapped(self, *, started: float, now: float) -> None:
        """A round from the first row ran from ``started`` to ``now``: space the next wrap."""
        took = now - started
        # What spaces wake-ups' wraps is a wrap's cost, and load only makes a wrap slower:
        # the cheapest of the last few. A loop's first wrap is cold (its connection's first
        # statements, the claim's first compile; through a pooler, a new server connection):
        # under load it can take a hundred times a warm one's time, so the wrap after it
        # waits at most COLD_WRAP_SPACING_MAX, and its own time spaces the ones after it.
        if self._cold:
            self._cold = False
            self._wrap_allowed_at = now + min(WRAP_SPACING * took, COLD_WRAP_SPACING_MAX)
        else:
            self._wrap_times.append(took)
            self._wrap_allowed_at = now + WRAP_SPACING * min(self._wrap_times)
        self.wrap_owed = False
        self._started = True
        self._spacing = max((FED_WRAP_SPACING if self.fed else WRAP_SPACING) * took, self.least_spacing)
        self._wrap_at = now + self._spacing
        self._expired_at = now + self._expired_every  # this wrap saw them

    def advance(self, last_key: Any, *, inclusive: bool = False) -> bool:
        """A sweep round saw keys up to ``last_key`` (None: none); the next starts after it
        (``inclusive``: at it). True when the caller must call ``at_top`` with the source's
        top key: nothing past the cursor was claimable, so the finished rows there are not
        walked again by every poll until the next wrap.
        """
        if last_key is not None:
            self.cursor = last_key
            self.inclusive = inclusive
            return False
        return True

    def restart_at(self, cursor: Any, *, inclusive: bool = False) -> None:
        """A round passed rows another transaction held: the next starts where it started
        (``cursor`` None: from the first row again)."""
        self.cursor = cursor
        self.inclusive = inclusive and cursor is not None

    def at_top(self, top_key: Any) -> None:
        """Nothing is claimable in the whole source: later rounds start at its top key.

        Instead of walking it all again. A row committed meanwhile below the top waits for
        the next wrap, unless a wake-up names it or looks behind the cursor.
        """
        self.cursor = top_key
        self.inclusive = False

    def behind(self, now: float) -> bool:
        """A wake-up named no row and too little was found past the cursor to explain it:
        the row may lie behind the cursor (enabled there, or waiting on an item that just
        ended). True: wrap now (the cursor is reset); else a wrap is owed for when its cost
        allows (see ``next_claim``).
        """
        if now >= self._wrap_allowed_at:
            self.cursor = None
            return True
        self.wrap_owed = True
        return False

    def expired_due(self, now: float) -> bool:
        """Whether to look up expired claims now (between wraps, every third of a lease, at
        most max_poll_seconds apart)."""
        if self.cursor is not None and now >= self._expired_at:
            self._expired_at = now + self._expired_every
            return True
        return False

    def next_claim(self, planned: float) -> float:
        """When the next claim should run, given the poll wait's ``planned`` time (monotonic)."""
        return min(planned, self._wrap_allowed_at) if self.wrap_owed else planned

    # --- decisions on what the engine read (pure: the engine reads, these decide) --------
    def position(self) -> Position:
        """Where the next sweep round starts."""
        return Position(self.cursor, self.inclusive)

    def needs_top_to_resume(self, *, won: bool, low: Any) -> bool:
        """A first claim that starts at the fleet's ``low`` needs the source's top key: if
        the source was emptied since, keys start over (``resume_at``)."""
        return not self._started and low is not None and not won

    @staticmethod
    def resume_at(low: Any, top: Any) -> Any:
        """Where a first claim starts given the fleet's ``low`` and the source's ``top`` key
        now: nowhere past the top (the source was emptied since: from the first row)."""
        return None if top is None or low > top else low

    def ready_again(self, ready: Sequence[Any]) -> None:
        """A starting loop read the items claimable again (given back by pods that stopped,
        reset), up to ``notify.MAX_NAMED_ROWS + 1``: they may lie below where the fleet's last
        wrap left off, so each is named; too many to name walk from the first row."""
        if len(ready) > notify.MAX_NAMED_ROWS:
            self.cursor = None
        for source_id in ready:
            self.claimable_again(source_id)

    def needs_lowest(self, rnd: Round) -> bool:
        """Whether ``saw`` needs the lowest claimable key after the round's start (a read
        without locks): to tell a row skipped because another transaction had it locked
        from no claimable row at all.

        A round that took nothing past the cursor needs it, unless it was an ordered
        query's (``inclusive``), which has looked this way already. A round that took rows
        needs it only when another worker claims the same source: its claim may hold a row
        below the ones taken.
        """
        if not rnd.swept or rnd.inclusive:
            return False
        return rnd.last_key is None or self.shares_source

    def needs_top(self, rnd: Round, lowest: Any) -> bool:
        """Whether ``saw`` needs the source's top key: the round found nothing claimable
        past the cursor, and no row was only skipped (``lowest`` as ``needs_lowest`` read)."""
        return rnd.swept and rnd.last_key is None and (rnd.inclusive or lowest is None)

    def saw(self, start: Position, rnd: Round, *, lowest: Any = None, top: Any = None, full: bool = False) -> None:
        """Move the cursor after a sweep round that started at ``start``.

        ``lowest`` and ``top``: what ``needs_lowest``/``needs_top`` asked the engine to read
        (None otherwise); ``full``: the round took as many rows as it could. Rules:
        - rows seen: the next round starts after the last (``inclusive``: at it);
        - nothing claimable past the cursor: the cursor moves to the source's top key, so
          finished rows there are not walked by every poll until the next wrap;
        - nothing taken, but a claimable row was skipped, locked by another transaction
          (another worker's claim, an application's update): the cursor stays and the
          next claim finds it;
        - rows taken, but one below them skipped, locked by another worker's claim on the
          same source: the next round starts where this one did;
        - an ordered query's round with room left that did not take its lowest claimable
          key (found without locks) skipped it, locked: the cursor stays at that key.
        ``skipped_locked`` says whether rows were skipped that way.
        """
        self._swept_locked = False
        if not rnd.swept:
            return
        if rnd.last_key is None:
            if not rnd.inclusive and lowest is not None:
                self._swept_locked = True  # the cursor stays where the round started
            else:
                self.at_top(top)
            return
        self.advance(rnd.last_key, inclusive=rnd.inclusive)
        if rnd.inclusive and not full and all(c.source_id != rnd.last_key for c in rnd.taken):
            self._swept_locked = True
        if self.shares_source and not rnd.inclusive and lowest is not None and lowest < rnd.last_key:
            self.restart_at(start.cursor, inclusive=start.inclusive)
            self._swept_locked = True

    def take_fleet_wrap(self) -> bool:
        """Whether the wrap just run was the one this loop won from the fleet (asked once)."""
        won, self._fleet_wrap = self._fleet_wrap, False
        return won

    def wrap_low(self, rnd: Round) -> str | None:
        """Where a wrap that ran ``rnd`` left off, as ``sql.sweeps`` records it: the lowest
        claimable key it found, else the top (None: a key without a text form)."""
        if rnd.taken:
            return notify.key_text(rnd.last_key if rnd.inclusive else rnd.taken[0].source_id)
        top = notify.key_text(self.cursor) if self.cursor is not None else ""
        return None if top is None else sweeps.TOP + top
