"""Unit tests of the claim engine's picker and waiting items: no database, no processes."""

from __future__ import annotations

import time

from dbworker.engine.picker import Lookup, Picker
from dbworker.engine.waiting import WaitingItems
from dbworker.sweep import Sweep


def picker() -> Picker:
    p = Picker(Sweep(keys_as_text=False, max_poll_seconds=10), lookup_every=1.0)
    if p.begin(0.0):
        p.sweep.turn(0.0, won=True, due_in=0.0)
    p.sweep.wrapped(started=0.0, now=0.01)
    p.sweep.advance(100)  # the cursor past every key used below
    return p


def test_waiting_items_come_due_in_time_order_each_key_at_its_earliest_time() -> None:
    w = WaitingItems()
    w.add("a", 5.0, now=0.0)
    w.add("b", 3.0, now=0.0)
    w.add("a", 9.0, now=0.0)  # already waits until 5: kept
    assert w.take_due(2.0) == ([], 3.0)
    assert w.take_due(5.0) == (["b", "a"], None)
    w.add("c", 8.0, now=6.0)
    w.add("c", 7.0, now=6.0)  # sooner: replaces it
    assert w.take_due(7.5)[0] == ["c"]
    assert w.take_due(8.0) == ([], None)  # the replaced time named nothing


def test_an_item_without_a_wait_is_named_at_once_and_a_waiting_one_when_due() -> None:
    p = picker()
    p.wait_until(7, None)
    p.wait_until(8, 0.0)
    p.wait_until(9, 60.0)
    assert p.plan().named == [7, 8]
    now = time.monotonic()
    assert p.take_due(now) is not None and p.plan().named == []
    assert p.take_due(now + 61.0) == now + 61.0
    assert p.plan().named == [9]


def test_a_failed_claim_puts_its_plan_back() -> None:
    p = picker()
    p.claimable_again(3)
    p.wake(("x",), again=False)  # off PostgreSQL a key text it cannot read names no row
    plan = p.plan()
    assert plan.named == [3] and plan.unnamed and not plan.wrapping
    p.put_back(plan)
    assert p.plan() == plan


def test_the_lookup_runs_every_period_and_reports_pause_changes_only() -> None:
    p = picker()
    assert p.lookup_due(0.0) and not p.lookup_due(0.5) and p.lookup_due(1.0)
    assert p.lookup_window == 2.0
    assert p.looked_up(Lookup(paused=False, waiting=[])) is None
    assert p.looked_up(Lookup(paused=True, waiting=[(4, 0.0)])) is True and p.paused
    assert p.looked_up(Lookup(paused=True, waiting=[])) is None
    assert p.looked_up(Lookup(paused=False, waiting=[])) is False
    assert p.plan().named == [4]


def test_expired_claims_the_lookup_read_are_named_for_the_next_claim() -> None:
    p = picker()
    assert p.looked_up(Lookup(paused=False, waiting=[], expired=[7, 9])) is None
    assert p.plan().named == [7, 9]  # taken over by key, wherever the cursor stands
