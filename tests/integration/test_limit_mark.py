"""A limited worker's mark (docs/limits.md, "Cost"; ``sql.turns``): rounds read a bounded
prefix of the claimable rows from it, yet take turns as the full read does, find rows made
claimable again below it, and rows named by wake-ups wherever they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, Limit, tuning
from dbworker.sql import claims, dialects, items, slots
from tests.apps import limited
from tests.apps.limited import Job
from tests.conftest import Database


@pytest.fixture
def lasting_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark is not walked past by time during a test: only the round's reads move it."""
    monkeypatch.setattr(tuning, "LIMIT_MARK_SECONDS", 3600.0)


def _build(db: Database, made: list[Coordinator], limits: list[Limit]) -> Coordinator:
    c = limited.build(db.url, limits=limits)
    made.append(c)
    return c


def _claim(c: Coordinator, limit: int, keys: Sequence[Any] | None = None) -> list[items.Claim]:
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        return claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=limit, lease_seconds=30,
                            limits=w.limits, keys=keys).taken  # fmt: skip


def _mark(c: Coordinator) -> Any:
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn, conn.begin():
        return slots.take_turn(conn, slots.slots_table(w.table)).mark


def _customers(db: Database, taken: list[items.Claim]) -> list[int]:
    with Session(db.engine) as s:
        return [s.get_one(Job, t.source_id).customer for t in taken]


def test_turns_beyond_the_rows_read_from_the_mark(
    db: Database, coordinators: list[Coordinator]
) -> None:
    # 300 rows of one customer first: more than a round reads from the mark, so the round
    # reads every claimable row, and the small customers still get their turns.
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=100)])
    limited.add_jobs(db.engine, [7] * 300 + [3] * 2 + [9] * 3)
    assert _customers(db, _claim(c, 6)) == [7, 3, 9, 7, 3, 9]


@pytest.mark.usefixtures("lasting_mark")
def test_the_mark_moves_to_the_lowest_claimable_row(
    db: Database, coordinators: list[Coordinator]
) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [1, 2, 3, 1])
    assert sorted(t.source_id for t in _claim(c, 3)) == [1, 2, 3]
    assert _mark(c) == 1  # that round saw row 1 claimable first
    assert _claim(c, 3) == []  # row 4 waits on customer 1's slot
    assert _mark(c) == 4


@pytest.mark.usefixtures("lasting_mark")
def test_a_row_given_back_below_the_mark_is_claimed(
    db: Database, coordinators: list[Coordinator]
) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [1, 2, 3])
    taken = _claim(c, 3)
    assert _claim(c, 3) == [] and _mark(c) == 3  # every row blocked: the mark is the top row
    w = c.registrations()[0]
    first = next(t for t in taken if t.source_id == 1)
    with dialects.connect(c.engine) as conn:
        assert items.give_back(conn, w.table, first)
        conn.commit()
    assert [t.source_id for t in _claim(c, 3)] == [1]


def _add(db: Database, rows: dict[int, int]) -> None:
    """Jobs by id (key: customer), as keys committed after greater ones would be."""
    with Session(db.engine) as s:
        s.execute(sa.insert(Job), [{"id": n, "customer": customer} for n, customer in rows.items()])
        s.commit()


def _named(db: Database, *ids: int) -> list[Any]:
    """Keys as wake-ups name them (``notify.key_text`` on PostgreSQL, values elsewhere)."""
    return [str(n) for n in ids] if db.backend == "postgresql" else list(ids)


@pytest.mark.usefixtures("lasting_mark")
def test_a_row_new_below_the_mark_is_claimed_when_named_or_walked(
    db: Database, coordinators: list[Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=5)])
    _add(db, {10: 1, 11: 1})
    assert len(_claim(c, 5)) == 2
    assert _claim(c, 5) == [] and _mark(c) == 11
    _add(db, {5: 1, 6: 1})  # below the mark, with no work record
    assert _claim(c, 5) == []  # not named, and the mark is fresh: not seen yet
    assert [t.source_id for t in _claim(c, 5, keys=_named(db, 5))] == [5]
    assert _mark(c) == 5  # lowered to the named row: row 6 is above it now
    assert [t.source_id for t in _claim(c, 5)] == [6]
    _add(db, {3: 1})
    assert _claim(c, 5) == []
    monkeypatch.setattr(
        tuning, "LIMIT_MARK_SECONDS", 0.0
    )  # the next round walks from the first row
    assert [t.source_id for t in _claim(c, 5)] == [3]


@pytest.mark.usefixtures("lasting_mark")
def test_a_named_row_left_on_its_limit_is_taken_when_its_slot_frees(
    db: Database, coordinators: list[Coordinator]
) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    _add(db, {10: 1, 11: 2})
    running = _claim(c, 5)
    assert len(running) == 2 and _claim(c, 5) == [] and _mark(c) == 11
    _add(db, {5: 1})  # below the mark, of customer 1, who is at its limit
    assert _claim(c, 5, keys=_named(db, 5)) == []
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        assert items.finish(conn, w.table, next(t for t in running if t.source_id == 10))
        conn.commit()
    assert [t.source_id for t in _claim(c, 5)] == [5]  # not named again: the mark went down to it
