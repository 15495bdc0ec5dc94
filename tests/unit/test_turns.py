"""The turn rule over a round's bounded read (``sql.turns.pick``): rank per key, then
position, keys without room left out, and no answer when rows not read could come first."""

from __future__ import annotations

from typing import Any

from dbworker import Limit
from dbworker.sql import turns


def _limits() -> list[Limit]:
    # The rule reads only which limit is keyed and its numbers (a registration checks the key).
    return [Limit(key="customer", concurrency=2)]


def _read(customers: list[str], *, complete: bool) -> turns.Read:
    return turns.Read([(n, [c]) for n, c in enumerate(customers, start=1)], complete, 1)


def _held(counts: dict[str, int], asked: list[list[list[str]]]) -> Any:
    def held(texts: list[list[str]]) -> dict[int, dict[str, int]]:
        asked.append(texts)
        return {0: {t[0]: counts.get(t[0], 0) for t in texts}}

    return held


def test_first_rows_of_every_key_then_the_second() -> None:
    found = _read(["a", "a", "a", "b", "c", "b"], complete=True)
    picked = turns.pick(found, _limits(), _held({}, []), per_key=2, wanted=6, needed=4)
    assert [n for n, _ in picked or []] == [1, 4, 5, 2, 6]  # a, b, c; then a, b (per key 2)


def test_keys_without_room_are_left_out() -> None:
    found = _read(["a", "b", "a", "c"], complete=True)
    picked = turns.pick(
        found, _limits(), _held({"a": 2, "c": 1}, []), per_key=2, wanted=4, needed=2
    )
    assert [n for n, _ in picked or []] == [2, 4]  # a holds both slots; c has room for one


def test_a_prefix_answers_only_with_first_rows_of_their_keys() -> None:
    # First rows of their keys: no row further on can come before them; a's second row
    # could come after an unread first row of another key, so it is not among the picks.
    found = _read(["a", "b", "c", "a"], complete=False)
    picked = turns.pick(found, _limits(), _held({}, []), per_key=2, wanted=8, needed=3)
    assert [n for n, _ in picked or []] == [1, 2, 3]
    # Fewer first rows than the round takes: the caller reads every claimable row instead.
    assert turns.pick(found, _limits(), _held({}, []), per_key=2, wanted=8, needed=4) is None


def test_slot_rows_are_asked_for_in_turn_order_a_batch_at_a_time() -> None:
    found = _read(["a", "b", "c", "d", "e"], complete=True)
    asked: list[list[list[str]]] = []
    picked = turns.pick(
        found, _limits(), _held({"a": 2, "b": 2}, asked), per_key=2, wanted=2, needed=1
    )
    assert [n for n, _ in picked or []] == [3, 4]
    assert asked == [[["a"], ["b"]], [["c"], ["d"]]]
