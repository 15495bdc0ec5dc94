"""Unit tests of dbworker.sweep: the cursor, its wraps and their spacing, rows named by key."""

from __future__ import annotations

from typing import Any

import pytest

from dbworker import tuning
from dbworker.sql import notify
from dbworker.sql.claims import Claim, Round
from dbworker.sweep import Position, Sweep


def begin(s: Sweep, now: float) -> None:
    """A claim's start in a loop alone in its fleet: every wrap it asks for is its own."""
    if s.begin(now):
        s.turn(now, won=True, due_in=0.0)


def swept(s: Sweep, *, now: float, last_key: object, seconds: float = 0.01) -> None:
    """One sweep round as the loop runs it: begin, a round from the cursor, advance."""
    begin(s, now)
    wrap = s.wrapping
    if wrap:
        s.wrapped(started=now, now=now + seconds)
    s.advance(last_key)


def test_a_first_claim_wraps_and_the_cursor_follows_the_rounds() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    begin(s, 0.0)
    assert s.wrapping
    swept(s, now=0.0, last_key=5)
    assert s.cursor == 5 and not s.wrapping
    swept(s, now=1.0, last_key=9)
    assert s.cursor == 9


def test_a_wrap_that_finds_nothing_leaves_the_cursor_at_the_top() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    begin(s, 0.0)
    s.wrapped(started=0.0, now=0.01)
    assert s.advance(None) is True  # the caller looks up the top key
    s.at_top(1000)
    assert s.cursor == 1000
    # From a cursor too: the finished rows between it and the top are not walked by every poll.
    s.advance(1200)
    assert s.advance(None) is True


def test_an_ordered_round_starts_the_next_at_its_lowest_claimable_key() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=None)
    s.at_top(50)
    s.advance(60, inclusive=True)  # key 60 is claimable and may have been left for later
    assert (s.cursor, s.inclusive) == (60, True)
    s.at_top(70)
    assert (s.cursor, s.inclusive) == (70, False)


def test_with_wakeup_triggers_periodic_wraps_are_rare_and_wake_ups_still_wrap() -> None:
    """The triggers name every written row: a periodic wrap only catches what they cannot see."""
    s = Sweep(keys_as_text=True, max_poll_seconds=1, fed=True)
    swept(s, now=0.0, last_key=3, seconds=0.0001)
    begin(s, tuning.FED_WRAP_POLLS * 1 - 0.1)
    assert not s.wrapping  # no wrap at max_poll_seconds, as without triggers
    begin(s, tuning.FED_WRAP_POLLS * 1 + 0.1)
    assert s.wrapping
    s = Sweep(keys_as_text=True, max_poll_seconds=1, fed=True)
    swept(s, now=0.0, last_key=3, seconds=0.5)  # a slow wrap: 10,000 times as long
    begin(s, 0.5 + 1000.0)
    assert not s.wrapping
    assert s.behind(0.5 + tuning.WRAP_SPACING * 0.5 + 0.1)  # a wake-up naming no row may wrap


def test_wraps_are_due_after_max_poll_or_a_hundred_times_their_cost() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=0.5)
    swept(s, now=0.0, last_key=3, seconds=0.3)  # a slow wrap: 0.3 s
    begin(s, 0.5 + 0.3)
    assert not s.wrapping  # max_poll_seconds passed, but not 100 x 0.3 s
    begin(s, 0.3 + tuning.WRAP_SPACING * 0.3)
    assert s.wrapping
    fast = Sweep(keys_as_text=True, max_poll_seconds=0.5)
    swept(fast, now=0.0, last_key=3, seconds=0.001)
    begin(fast, 0.4)
    assert not fast.wrapping
    begin(fast, 0.502)
    assert fast.wrapping


def test_named_rows_behind_the_cursor_are_claimed_by_key_those_past_it_left_to_the_sweep() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    s.wake(["7", "60", "abc"])
    keys, unnamed = s.take_named()
    assert keys == ["7", "abc"] and not unnamed
    assert s.take_named() == ([], False)  # taken once


@pytest.mark.parametrize("as_text", [True, False])
def test_named_rows_a_full_round_by_key_did_not_take_are_named_for_the_next_claim(as_text: bool) -> None:
    # Twenty rows named behind the cursor while one slot was free: the round by key takes
    # one; the other nineteen must not wait for the next wrap (found by tests/model).
    s = Sweep(keys_as_text=as_text, max_poll_seconds=120)
    swept(s, now=0.0, last_key=100)
    named = [str(k) if as_text else k for k in range(1, 21)]
    for key in named:
        s.name(key)
    keys, _ = s.take_named()
    assert keys == sorted(named)
    s.left_by_full_round(keys, taken=[5])
    again, _ = s.take_named()
    assert sorted(again) == sorted(k for k in named if k not in ("5", 5))
    # Ended here before, they are still claimed (not taken for their handlers' own writes).
    s.ended(7)
    s.left_by_full_round(again, taken=[])
    assert (("7" if as_text else 7) in s.take_named()[0])


@pytest.mark.parametrize("as_text", [True, False])
def test_named_rows_a_round_by_key_skipped_locked_are_named_again_and_claimed_soon(as_text: bool) -> None:
    # A row enabled behind the cursor while another transaction holds it FOR KEY SHARE: the
    # wake-up names it, the round by key skips it (SKIP LOCKED), and its release writes
    # nothing, so no wake-up follows. Dropped, it would wait for a wrap (found by tests/model).
    s = Sweep(keys_as_text=as_text, max_poll_seconds=120)
    swept(s, now=0.0, last_key=100)
    for k in (3, 5, 8):
        s.name(str(k) if as_text else k)
    keys, _ = s.take_named()
    assert not s.skipped_locked
    # Took 3 of three named under a limit of 4: nothing left, nothing to read.
    assert not s.needs_named_claimable(keys, taken=[3, 5, 8], limit=4)
    # Took 3 under a limit of 1: a full round (left_by_full_round names the rest).
    assert not s.needs_named_claimable(keys, taken=[3], limit=1)
    # Took 3 under a limit of 4: 5 and 8 were held, or are not claimable; the read tells.
    assert s.needs_named_claimable(keys, taken=[3], limit=4)
    s.left_locked([5])  # the read without locks: 5 is claimable, 8 is not (ended elsewhere)
    assert s.skipped_locked  # the loop claims again soon, backing off while it stays held
    s.ended(5)  # ended here before: still named (held, not its handler's own write)
    again, _ = s.take_named()
    assert again == ["5" if as_text else 5]
    assert not s.skipped_locked  # a new claim: what its round by key skips decides
    s.left_locked([])
    assert not s.skipped_locked and s.take_named() == ([], False)


def test_named_rows_are_dropped_during_a_wrap_which_reaches_every_row() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    s.wake(["7"])
    assert s.take_named() == ([], False)


def test_too_many_named_rows_make_the_claim_sweep_from_the_start() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=10_000)
    s.wake([str(k) for k in range(notify.MAX_NAMED_ROWS + 1)])
    assert s.take_named() == ([], False)
    assert s.wrapping


def test_a_handlers_own_write_to_an_ended_item_needs_no_claim_unless_made_claimable_again() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    s.ended(7)
    s.wake(["7"])
    assert s.take_named() == ([], False)
    s.wake(["7"], again=True)  # given back or reset: claim it
    assert s.take_named() == (["7"], False)


def test_keys_of_values_are_named_where_claims_do_not_take_text() -> None:
    s = Sweep(keys_as_text=False, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    s.wake(["7"])  # a notification's keys are ignored off PostgreSQL
    assert s.take_named() == ([], True)
    s.claimable_again(7)  # our own item, by value
    s.claimable_again(70)  # past the cursor: the sweep reaches it
    assert s.take_named() == ([7], False)


def test_an_item_that_ended_here_and_is_claimable_again_is_named_whatever_its_keys_form() -> None:
    # A query failed here, was reset, and now ends Unfinished (its next page): claim it by key,
    # not mistake it for its handler's own write (which left it to the next wrap, minutes away).
    for as_text, key in ((True, "7"), (False, 7)):
        s = Sweep(keys_as_text=as_text, max_poll_seconds=10)
        swept(s, now=0.0, last_key=50)
        s.ended(7)
        s.claimable_again(7)
        assert s.take_named() == ([key], False), as_text


def test_what_a_failed_claim_took_is_named_again_for_the_next() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    s.ended(7)
    s.wake(["7"], again=True)
    s.wake()
    taken = s.take_named()
    assert taken == (["7"], True)
    s.put_back(taken[0], unnamed=taken[1])  # the claim's round trip raised
    assert s.take_named() == taken
    assert s.take_named() == ([], False)


def test_an_item_without_a_text_form_makes_the_next_claim_wrap() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    s.claimable_again(("composite", 1))
    assert s.wrapping


def test_an_unnamed_wake_up_wraps_at_once_or_owes_a_wrap_for_when_its_cost_allows() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=120)
    s.wrapped(started=-1.0, now=-0.99)  # the loop's first, cold (see the test below)
    s.cursor = None
    swept(s, now=0.0, last_key=50, seconds=0.3)  # the next wrap is allowed from 30.3 s
    s.wake()
    assert s.take_named() == ([], True)
    assert s.behind(1.0) is False and s.wrap_owed
    assert s.next_claim(100.0) == 0.3 + tuning.WRAP_SPACING * 0.3
    assert s.next_claim(5.0) == 5.0
    begin(s, 31.0)  # the owed wrap is due
    assert s.wrapping
    s.wrapped(started=31.0, now=31.01)
    assert not s.wrap_owed
    s.advance(50)
    assert s.behind(40.0) is True and s.wrapping  # 100 x 0.01 s passed: wrap now


def test_a_loops_first_wrap_is_cold_and_holds_back_a_wake_ups_wrap_a_few_seconds_at_most() -> None:
    """Its time (a new connection, the claim's first compile; seconds under load) is no
    measure of a wrap's cost: the next wrap waits at most COLD_WRAP_SPACING_MAX, and that
    wrap's time spaces the ones after it."""
    s = Sweep(keys_as_text=True, max_poll_seconds=120)
    swept(s, now=0.0, last_key=50, seconds=0.6)  # 100 x 0.6 s would hold a bulk update a minute
    s.wake()
    assert s.take_named() == ([], True)
    assert s.behind(1.0) is False and s.wrap_owed
    assert s.next_claim(100.0) == pytest.approx(0.6 + tuning.COLD_WRAP_SPACING_MAX)
    begin(s, 5.7)
    assert s.wrapping
    s.wrapped(started=5.7, now=5.71)
    s.advance(50)
    s.wake()
    assert s.take_named() == ([], True)
    assert s.behind(6.0) is False and s.wrap_owed  # from now on 100 x a warm wrap's time
    assert s.next_claim(100.0) == pytest.approx(5.71 + tuning.WRAP_SPACING * 0.01)


def test_a_wrap_slowed_by_load_does_not_hold_back_a_wake_ups_wrap() -> None:
    """The cheapest of the last three warm wraps spaces wake-ups' wraps: load only slows a wrap."""
    s = Sweep(keys_as_text=True, max_poll_seconds=120)
    s.wrapped(started=0.0, now=0.5)  # cold
    s.wrapped(started=1.0, now=1.01)
    s.wrapped(started=3.0, now=3.6)  # a busy moment
    assert s.behind(3.6 + tuning.WRAP_SPACING * 0.01 + 0.01) is True
    for start in (10.0, 20.0):
        s.wrapped(started=start, now=start + 0.6)
    assert s.behind(20.6 + tuning.WRAP_SPACING * 0.01 + 0.01) is False  # three slow ones: its cost now


def test_expired_claims_are_looked_up_between_wraps_every_max_poll() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    assert not s.expired_due(5.0)  # the wrap saw them
    assert s.expired_due(10.02)
    assert not s.expired_due(12.0)
    assert s.expired_due(20.03)
    begin(s, 1e9)  # during a wrap there is nothing to look up
    assert not s.expired_due(1e9)


def test_expired_claims_are_looked_up_every_third_of_a_lease_however_long_the_polls() -> None:
    # max_poll_seconds 120, lease 6: a SIGKILLed pod's items expire within 6 s of its death
    # and must not wait for the next poll or wrap (found by tests/model).
    s = Sweep(keys_as_text=True, max_poll_seconds=120, lease_seconds=6)
    swept(s, now=0.0, last_key=50)
    assert not s.expired_due(1.9)
    assert s.expired_due(2.01)
    assert not s.expired_due(3.0)
    assert s.expired_due(4.02)
    # A lease longer than three polls: max_poll_seconds still bounds it.
    s = Sweep(keys_as_text=True, max_poll_seconds=10, lease_seconds=300)
    swept(s, now=0.0, last_key=50)
    assert not s.expired_due(9.9) and s.expired_due(10.01)


def test_recently_ended_keys_are_bounded() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=10**9)
    for k in range(tuning.RECENT_ENDED + 1):
        s.ended(k)
    s.wake(["0", "1"])
    assert s.take_named() == (["0"], False)  # the oldest was forgotten


def test_the_change_tables_key_texts_are_named_as_values() -> None:
    """MySQL/MariaDB and SQLite: the change table's texts, read as the key's values."""
    s = Sweep(keys_as_text=False, max_poll_seconds=10, parse_key=lambda t: int(t) if t.isdigit() else None)
    swept(s, now=0.0, last_key=50)
    s.wake(["7", "60"])
    assert s.take_named() == ([7], False)  # 60 lies past the cursor: the sweep's
    s.wake(["x"])  # a text it cannot read names no row
    assert s.take_named() == ([], True)


def test_a_wrap_another_pod_took_is_not_walked_again_and_a_new_loop_starts_where_it_left_off() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    assert s.begin(0.0)  # the first claim asks the fleet
    s.turn(0.0, won=False, due_in=500.0, low=42, inclusive=True)
    assert (s.cursor, s.inclusive) == (42, True)  # not from the first row
    s.advance(50)
    assert not s.begin(499.0)  # the fleet's next wrap is not due
    assert s.begin(501.0)
    s.turn(501.0, won=False, due_in=300.0, low=7)
    assert s.cursor == 50  # a running loop keeps its own cursor
    assert s.begin(802.0)
    s.turn(802.0, won=True, due_in=0.0)
    assert s.wrapping
    t = Sweep(keys_as_text=True, max_poll_seconds=10)
    assert t.begin(0.0)
    t.turn(0.0, won=False, due_in=500.0, low=None)  # no wrap finished yet: walk
    assert t.wrapping


# --- what a round saw: the sweep decides on what the engine read, and reads nothing ------


def round_of(*taken: int, last_key: Any = None, inclusive: bool = False, swept: bool = True) -> Round:
    claims = [Claim(k, f"t{k}") for k in taken]
    return Round(claims, len(claims), last_key if last_key is not None or not claims else claims[-1].source_id,
                 swept, inclusive)  # fmt: skip


def settle(s: Sweep, rnd: Round, *, lowest: Any = None, top: Any = None, full: bool = False) -> tuple[bool, bool]:
    """What the engine's fetch does after a round: read only what the sweep asks, tell it.
    Returns which reads were asked (lowest, top)."""
    start = s.position()
    asked_lowest = s.needs_lowest(rnd)
    low = lowest if asked_lowest else None
    asked_top = s.needs_top(rnd, low)
    s.saw(start, rnd, lowest=low, top=top if asked_top else None, full=full)
    return asked_lowest, asked_top


def at(cursor: Any, *, inclusive: bool = False, shares_source: bool = False) -> Sweep:
    s = Sweep(keys_as_text=True, max_poll_seconds=10, shares_source=shares_source)
    swept(s, now=0.0, last_key=cursor)
    s.inclusive = inclusive
    return s


def test_a_round_that_took_rows_moves_the_cursor_to_its_last_key_without_reading() -> None:
    s = at(10)
    assert settle(s, round_of(11, 12, 15)) == (False, False)
    assert s.position() == Position(15, False) and not s.skipped_locked


def test_a_round_that_found_nothing_moves_the_cursor_to_the_top_once_no_row_was_only_skipped() -> None:
    s = at(10)
    assert settle(s, round_of(), lowest=None, top=900) == (True, True)
    assert s.position() == Position(900, False) and not s.skipped_locked


def test_a_round_that_skipped_a_locked_row_keeps_the_cursor_and_reads_no_top() -> None:
    """SKIP LOCKED passed a claimable row another transaction had locked (an application's
    update, another worker's claim): the cursor stays, and the loop claims again soon."""
    s = at(10)
    assert settle(s, round_of(), lowest=11, top=900) == (True, False)
    assert s.position() == Position(10, False) and s.skipped_locked
    assert settle(s, round_of(11)) == (False, False)  # its holder committed: the next round takes it
    assert s.position() == Position(11, False) and not s.skipped_locked


def test_an_ordered_round_that_did_not_take_its_lowest_claimable_key_skipped_it_locked() -> None:
    """An ordered query's round reads its lowest claimable key without locks, then claims
    FOR UPDATE SKIP LOCKED from there: a row another transaction holds (the other worker's
    claim of the same row, an application's lock released without a write) is found and
    not taken. The loop must claim again soon, not at its next poll (found by tests/model)."""
    s = at(10)
    assert settle(s, round_of(last_key=816, inclusive=True)) == (False, False)
    assert s.position() == Position(816, True) and s.skipped_locked
    assert settle(s, round_of(830, last_key=816, inclusive=True)) == (False, False)  # took another, not 816
    assert s.skipped_locked
    # Took as many as it could: 816 may simply come later in the query's own order.
    assert settle(s, round_of(830, last_key=816, inclusive=True), full=True) == (False, False)
    assert not s.skipped_locked
    assert settle(s, round_of(830, 816, last_key=816, inclusive=True)) == (False, False)
    assert s.position() == Position(816, True) and not s.skipped_locked


def test_an_ordered_rounds_cursor_is_its_lowest_claimable_key_and_it_reads_only_the_top_when_empty() -> None:
    s = at(10)
    assert settle(s, round_of(30, 20, last_key=20, inclusive=True)) == (False, False)
    assert s.position() == Position(20, True)
    assert settle(s, round_of(inclusive=True), top=500) == (False, True)  # it looked without locks already
    assert s.position() == Position(500, False)


def test_a_round_by_key_leaves_the_cursor_alone() -> None:
    s = at(10)
    assert settle(s, round_of(3, 4, swept=False)) == (False, False)
    assert s.position() == Position(10, False)


def test_two_workers_on_one_source_restart_where_a_round_began_when_it_passed_a_row_the_other_held() -> None:
    """Another worker's claim on the same source holds a row below the ones this round took:
    the next round starts where this one did, not past the held row."""
    s = at(10, shares_source=True)
    assert settle(s, round_of(13, 14), lowest=12) == (True, False)
    assert s.position() == Position(10, False) and s.skipped_locked
    s.inclusive = True  # ... and where it did, inclusive included
    start = s.position()
    s.saw(start, round_of(13), lowest=11)
    assert s.position() == Position(10, True)


def test_two_workers_on_one_source_move_on_when_nothing_was_passed() -> None:
    s = at(10, shares_source=True)
    assert settle(s, round_of(12, 14), lowest=20) == (True, False)  # the lowest lies past them
    assert s.position() == Position(14, False) and not s.skipped_locked
    assert settle(s, round_of(15), lowest=None) == (True, False)  # nothing claimable is left
    assert s.position() == Position(15, False)


def test_one_worker_alone_on_its_source_reads_nothing_after_a_round_that_took_rows() -> None:
    s = at(10)
    assert not s.needs_lowest(round_of(12, 14))


def test_a_wrap_that_skipped_a_locked_row_restarts_from_the_first_row() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10, shares_source=True)
    begin(s, 0.0)
    assert s.wrapping
    settle(s, round_of(5, 6), lowest=2)
    assert s.wrapping and s.skipped_locked  # the next round walks from the first row again


def test_a_starting_loop_resumes_where_the_fleet_left_off_unless_the_source_was_emptied() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    assert s.begin(0.0)
    assert s.needs_top_to_resume(won=False, low=42)
    assert not s.needs_top_to_resume(won=True, low=42)  # it wraps: nothing to read
    assert not s.needs_top_to_resume(won=False, low=None)  # unknown: it wraps
    assert Sweep.resume_at(42, 100) == 42
    assert Sweep.resume_at(42, 10) is None  # emptied and refilled: keys start over
    assert Sweep.resume_at(42, None) is None  # empty
    s.turn(0.0, won=False, due_in=50.0, low=Sweep.resume_at(42, 100))
    assert s.position() == Position(42, False)
    assert not s.needs_top_to_resume(won=False, low=42)  # only a first claim resumes


def test_items_claimable_again_below_where_a_loop_starts_are_named_or_make_it_wrap() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    s.begin(0.0)
    s.turn(0.0, won=False, due_in=50.0, low=100)
    s.ready_again([3, 7])
    assert s.take_named() == (["3", "7"], False)
    s.ready_again(list(range(notify.MAX_NAMED_ROWS + 1)))  # too many to name
    assert s.wrapping


def test_only_a_wrap_won_from_the_fleet_is_recorded_and_only_once() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    s.begin(0.0)
    s.turn(0.0, won=True, due_in=0.0)
    assert s.take_fleet_wrap() and not s.take_fleet_wrap()
    t = Sweep(keys_as_text=True, max_poll_seconds=10)
    t.begin(0.0)
    t.turn(0.0, won=True, due_in=0.0, fleet=False)  # no fleet table: its own wrap, not recorded
    assert t.wrapping and not t.take_fleet_wrap()


def test_a_wrap_records_the_lowest_claimable_key_it_found_or_the_top() -> None:
    s = at(50)
    assert s.wrap_low(round_of(7, 9)) == "7"
    assert s.wrap_low(round_of(9, 7, last_key=7, inclusive=True)) == "7"
    assert s.wrap_low(round_of()) == "top:50"
    s.cursor = ("composite", 1)
    assert s.wrap_low(round_of()) is None  # no text form


def test_the_restart_at_wrap_and_at_top_rules_compose_over_rounds() -> None:
    """A round past held rows, one that finds nothing, one after the holder committed."""
    s = at(0, shares_source=True)
    settle(s, round_of(2, 3), lowest=1)  # 1 held by the other worker: restart at 0
    settle(s, round_of(1, 4), lowest=None)
    settle(s, round_of(), lowest=None, top=4)
    assert s.position() == Position(4, False) and not s.skipped_locked
