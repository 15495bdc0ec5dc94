"""Unit tests of what a handler process's "skipped" answer leaves of its slot (dbworker.pool)."""

from __future__ import annotations

from dbworker.pool import skip_of
from dbworker.sql.items import Claim

A, B, C = Claim(1, "a"), Claim(2, "b"), Claim(3, "c")


def test_a_skip_of_the_pending_item_leaves_the_running_one() -> None:
    assert skip_of(A, B, "b") == (B, A, None)


def test_a_skip_of_the_next_item_with_nothing_behind_it_leaves_the_slot_idle() -> None:
    # B was pending behind A; A's result came first (B became the slot's claim), then the skip.
    assert skip_of(B, None, "b") == (B, None, None)


def test_a_skip_that_comes_after_another_item_was_handed_over_makes_that_one_next() -> None:
    # B became the claim when A's result came, C was handed over behind it, then B's skip came:
    # the process runs C next. Left pending (the slot idle, B's claim gone), the next submit
    # made C's result arrive for another claim, and the loop ended on an assertion (found by
    # tests/model on a loaded machine).
    assert skip_of(B, C, "b") == (B, C, None)
