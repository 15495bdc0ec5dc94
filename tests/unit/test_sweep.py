"""Unit tests of dbworker.sweep: the cursor, its wraps and their spacing, rows named by key."""

from __future__ import annotations

from dbworker import sweep as sweeps
from dbworker.sql import notify
from dbworker.sweep import Sweep


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
    begin(s, sweeps.FED_WRAP_POLLS * 1 - 0.1)
    assert not s.wrapping  # no wrap at max_poll_seconds, as without triggers
    begin(s, sweeps.FED_WRAP_POLLS * 1 + 0.1)
    assert s.wrapping
    s = Sweep(keys_as_text=True, max_poll_seconds=1, fed=True)
    swept(s, now=0.0, last_key=3, seconds=0.5)  # a slow wrap: 10,000 times as long
    begin(s, 0.5 + 1000.0)
    assert not s.wrapping
    assert s.behind(0.5 + sweeps.WRAP_SPACING * 0.5 + 0.1)  # a wake-up naming no row may wrap


def test_wraps_are_due_after_max_poll_or_a_hundred_times_their_cost() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=0.5)
    swept(s, now=0.0, last_key=3, seconds=0.3)  # a slow wrap: 0.3 s
    begin(s, 0.5 + 0.3)
    assert not s.wrapping  # max_poll_seconds passed, but not 100 x 0.3 s
    begin(s, 0.3 + sweeps.WRAP_SPACING * 0.3)
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
    swept(s, now=0.0, last_key=50, seconds=0.3)  # the next wrap is allowed from 30.3 s
    s.wake()
    assert s.take_named() == ([], True)
    assert s.behind(1.0) is False and s.wrap_owed
    assert s.next_claim(100.0) == 0.3 + sweeps.WRAP_SPACING * 0.3
    assert s.next_claim(5.0) == 5.0
    begin(s, 31.0)  # the owed wrap is due
    assert s.wrapping
    s.wrapped(started=31.0, now=31.01)
    assert not s.wrap_owed
    s.advance(50)
    assert s.behind(40.0) is True and s.wrapping  # 100 x 0.01 s passed: wrap now


def test_expired_claims_are_looked_up_between_wraps_every_max_poll() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=50)
    assert not s.expired_due(5.0)  # the wrap saw them
    assert s.expired_due(10.02)
    assert not s.expired_due(12.0)
    assert s.expired_due(20.03)
    begin(s, 1e9)  # during a wrap there is nothing to look up
    assert not s.expired_due(1e9)


def test_recently_ended_keys_are_bounded() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=10**9)
    for k in range(sweeps.RECENT_ENDED + 1):
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
