"""Unit tests of dbworker.sweep: the cursor, its wraps and their spacing, rows named by key."""

from __future__ import annotations

from dbworker import sweep as sweeps
from dbworker.sql import notify
from dbworker.sweep import Sweep


def swept(s: Sweep, *, now: float, last_key: object, seconds: float = 0.01) -> None:
    """One sweep round as the loop runs it: begin, a round from the cursor, advance."""
    s.begin(now)
    wrap = s.wrapping
    if wrap:
        s.wrapped(started=now, now=now + seconds)
    s.advance(last_key)


def test_a_first_claim_wraps_and_the_cursor_follows_the_rounds() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    s.begin(0.0)
    assert s.wrapping
    swept(s, now=0.0, last_key=5)
    assert s.cursor == 5 and not s.wrapping
    swept(s, now=1.0, last_key=9)
    assert s.cursor == 9


def test_a_wrap_that_finds_nothing_leaves_the_cursor_at_the_top() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    s.begin(0.0)
    s.wrapped(started=0.0, now=0.01)
    assert s.advance(None) is True  # the caller looks up the top key
    s.at_top(1000)
    assert s.cursor == 1000
    assert s.advance(None) is False  # from a cursor, nothing found moves nothing


def test_wraps_are_due_after_max_poll_or_a_hundred_times_their_cost() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=0.5)
    swept(s, now=0.0, last_key=3, seconds=0.3)  # a slow wrap: 0.3 s
    s.begin(0.5 + 0.3)
    assert not s.wrapping  # max_poll_seconds passed, but not 100 x 0.3 s
    s.begin(0.3 + sweeps.WRAP_SPACING * 0.3)
    assert s.wrapping
    fast = Sweep(keys_as_text=True, max_poll_seconds=0.5)
    swept(fast, now=0.0, last_key=3, seconds=0.001)
    fast.begin(0.4)
    assert not fast.wrapping
    fast.begin(0.502)
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
    s.begin(31.0)  # the owed wrap is due
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
    s.begin(1e9)  # during a wrap there is nothing to look up
    assert not s.expired_due(1e9)


def test_recently_ended_keys_are_bounded() -> None:
    s = Sweep(keys_as_text=True, max_poll_seconds=10)
    swept(s, now=0.0, last_key=10**9)
    for k in range(sweeps.RECENT_ENDED + 1):
        s.ended(k)
    s.wake(["0", "1"])
    assert s.take_named() == (["0"], False)  # the oldest was forgotten
