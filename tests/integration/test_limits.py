"""Limits (docs/limits.md): claims within per-key concurrency and rate limits, from many
claimers at once; slots freed by the outcome and by an expired lease; turns between keys."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus, Limit
from dbworker import limits as limits_
from dbworker.sql import claims, dialects, items, slots, tables
from tests.apps import limited
from tests.apps.limited import Job
from tests.conftest import Database
from tests.helpers import wait_until


def _build(db: Database, made: list[Coordinator], limits: list[Limit], **settings: Any) -> Coordinator:
    c = limited.build(db.url, limits=limits, **settings)
    made.append(c)
    return c


def _claim(db: Database, c: Coordinator, limit: int, lease: float = 30) -> list[items.Claim]:
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        return claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=limit,
                            lease_seconds=lease, limits=w.limits).taken  # fmt: skip


def _customers(db: Database, taken: list[items.Claim]) -> Counter[int]:
    with Session(db.engine) as s:
        return Counter(s.get_one(Job, c.source_id).customer for c in taken)


def _claim_from_threads(db: Database, c: Coordinator, threads: int, rounds: int) -> list[items.Claim]:
    got: list[items.Claim] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    gate = threading.Barrier(threads)

    def run() -> None:
        gate.wait()
        for _ in range(rounds):
            try:
                taken = _claim(db, c, 3)
            except sa.exc.DBAPIError as exc:  # a deadlock or busy SQLite: claimers retry
                if not dialects.is_transient(exc):
                    errors.append(exc)
                continue
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            with lock:
                got.extend(taken)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors
    return got


def test_concurrent_claimers_never_exceed_a_key_concurrency(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=2), Limit(concurrency=7)])
    limited.add_jobs(db.engine, [n % 5 for n in range(40)])
    got = _claim_from_threads(db, c, threads=8, rounds=4)
    per = _customers(db, got)
    # Nothing ended, so the slots taken are all the claims there can be: 2 per key, 7 in all.
    assert len(got) == 7 and max(per.values()) == 2, per
    assert len({g.source_id for g in got}) == len(got)


def test_the_outcome_frees_the_slot_in_its_transaction(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [1, 1, 1])
    [first] = _claim(db, c, 5)
    assert _claim(db, c, 5) == []
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        assert items.finish(conn, w.table, first)
        conn.commit()
    [second] = _claim(db, c, 5)
    assert second.source_id != first.source_id


def test_a_slot_of_an_expired_lease_comes_back_and_fences_its_holder(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [1, 1])
    [old] = _claim(db, c, 5, lease=0.3)
    w = c.registrations()[0]

    def next_claim() -> list[items.Claim]:
        return _claim(db, c, 5)

    [new] = wait_until(next_claim, what="the slot back after the lease")
    with dialects.connect(c.engine) as conn:
        lost = items.renew(conn, w.table, [old], lease_seconds=30)
        # The expired holder cannot come back above the limit: its commit is refused, and its
        # renewal finds the claim lost once its item is claimed again (given back and not yet
        # claimed, the record has no token, as an item that ended: items.renew).
        assert lost == ([old] if new.source_id == old.source_id else [])
        assert not items.finish(conn, w.table, old)
        conn.rollback()
    assert _claim(db, c, 5) == []  # one running: the limit holds
    assert new.source_id in (1, 2)


def test_rate_limits_starts_per_key_within_the_period(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, rate=3, per=3600)])
    limited.add_jobs(db.engine, [n % 4 for n in range(40)])
    got = _claim_from_threads(db, c, threads=8, rounds=3)
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        for claim in got:  # ending them frees no rate slot
            items.finish(conn, w.table, claim)
        conn.commit()
    got += _claim(db, c, 10)
    assert sorted(_customers(db, got).values()) == [3, 3, 3, 3]


def test_a_short_rate_period_lets_the_next_starts_through(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(rate=2, per=3)])  # longer than a round on a loaded machine
    limited.add_jobs(db.engine, [1] * 6)
    assert len(_claim(db, c, 6)) == 2
    taken: list[items.Claim] = []

    def more() -> bool:
        taken.extend(_claim(db, c, 6))
        return len(taken) >= 4

    wait_until(more, what="two more starts in the next period")
    assert len(taken) == 4


def test_claims_take_turns_between_keys(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=100)])
    limited.add_jobs(db.engine, [7] * 50 + [3] * 2 + [9] * 3)  # the big customer's rows come first
    taken = _claim(db, c, 6)
    with Session(db.engine) as s:
        order = [s.get_one(Job, t.source_id).customer for t in taken]
    # Round one: the first waiting row of each key, in the order of those rows; then round two.
    assert order == [7, 3, 9, 7, 3, 9]


def test_a_lowered_limit_waits_for_running_items_above_it(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=3)])
    limited.add_jobs(db.engine, [1] * 6)
    running = _claim(db, c, 6)
    assert len(running) == 3
    lowered = Coordinator(db.session_factory, database_url=db.url)
    coordinators.append(lowered)
    lowered.transactional_worker(name="jobs", source=Job, limits=[Limit(key=Job.customer, concurrency=1)])(limited.handle)
    w = c.registrations()[0]
    for claim in running[:2]:  # two of three end: one still runs, at the new limit
        with dialects.connect(c.engine) as conn:
            items.finish(conn, w.table, claim)
            conn.commit()
        assert _claim(db, lowered, 6) == []
    with dialects.connect(c.engine) as conn:
        items.finish(conn, w.table, running[2])
        conn.commit()
    assert len(_claim(db, lowered, 6)) == 1


def test_a_fleet_drains_within_the_limits(db: Database, coordinators: list[Coordinator]) -> None:
    made = [_build(db, coordinators, [Limit(key=Job.customer, concurrency=1), Limit(concurrency=3)], concurrency=3)
            for _ in range(2)]  # fmt: skip
    limited.add_jobs(db.engine, [n % 4 for n in range(24)], hold=0.05)
    for c in made:
        c.start()
    ids = list(range(1, 25))

    def done() -> bool:
        with Session(db.engine) as s:
            return all(made[0].execution_status(s, worker="jobs", source_id=i) is ExecutionStatus.FINISHED for i in ids)

    wait_until(done, timeout=300, what="every job finished")
    spans = limited.spans(db.engine)
    assert len(spans) == 24
    assert limited.most_at_once([(s.started, s.ended) for s in spans]) <= 3
    for customer in range(4):
        assert limited.most_at_once([(s.started, s.ended) for s in spans if s.customer == customer]) == 1


def test_the_slots_table_is_made_beside_the_work_table(db: Database, coordinators: list[Coordinator]) -> None:
    _build(db, coordinators, [Limit(concurrency=1)])
    assert {"jobs_work", "jobs_slots"} <= set(sa.inspect(db.engine).get_table_names())
    assert tables.table_name("jobs") == "jobs_work"


def test_an_item_ending_in_one_pod_wakes_the_others(db: Database, coordinators: list[Coordinator]) -> None:
    slow = {"poll_seconds": 600, "max_poll_seconds": 600}  # no poll comes within the test's bound
    # The first pod's eligible query holds job 1 only: once job 1 ends it claims nothing more.
    first = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)], eligible=limited.first_job, **slow)
    limited.add_jobs(db.engine, [1], hold=-1)
    limited.add_jobs(db.engine, [1])
    first.start()

    def status(i: int) -> ExecutionStatus | None:
        with Session(db.engine) as s:
            return first.execution_status(s, worker="jobs", source_id=i)

    wait_until(lambda: status(1) is ExecutionStatus.WORKING, what="job 1 running in the first pod")
    second = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)], concurrency=1, **slow)
    second.start()  # its first claim finds job 2 waiting on the slot job 1 holds
    with Session(db.engine) as s:
        s.execute(sa.update(Job).where(Job.id == 1).values(hold=0))  # job 1 ends
        s.commit()
    wait_until(lambda: status(2) is ExecutionStatus.FINISHED, timeout=120, what="job 2 claimed by the second pod")
    assert {s.job_id: s.pid for s in limited.spans(db.engine)}[2] in second.handler_pids()


def test_items_waiting_only_on_a_limit_are_not_backlog(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=2)])
    limited.add_jobs(db.engine, [1] * 10 + [2] * 3)
    assert c.backlog("jobs") == 4  # two of each customer could start now
    taken = _claim(db, c, 3)
    assert len(taken) == 3
    assert c.backlog("jobs") == 1  # customer 1 is at its limit; one of customer 2 could start
    assert c.backlog("jobs", cap=0) == 0


def _slot_rows(db: Database, c: Coordinator) -> Counter[int]:
    """How many rows the slots table has, by kind (the round row aside)."""
    w = c.registrations()[0]
    s = slots.slots_table(w.table)
    with Session(db.engine) as session:
        return Counter(session.execute(sa.select(s.c.kind).where(s.c.kind >= 0)).scalars())


def _prune(c: Coordinator, batch: int) -> int:
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        return slots.prune(conn, slots.slots_table(w.table), w.table, limits_.kinds(w.limits), batch=batch)


def test_free_slot_rows_are_pruned_in_batches_and_held_ones_kept(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1), Limit(key=Job.customer, rate=50, per=0.5)])
    limited.add_jobs(db.engine, [1, 2, 3, 4, 5])
    taken = _claim(db, c, 5)
    assert len(taken) == 5 and _slot_rows(db, c) == {0: 5, 3: 5}  # a concurrency and a rate slot per key
    w = c.registrations()[0]
    ended = [t for t in taken if t.source_id not in (1, 2)]  # job n is customer n's
    with dialects.connect(c.engine) as conn:
        for claim in ended:  # customers 3, 4 and 5 end; 1 and 2 still run
            assert items.finish(conn, w.table, claim)
        conn.commit()
    assert _prune(c, batch=2) >= 2  # at most 2 a kind in one pass
    pruned: list[int] = []

    def all_free_gone() -> bool:
        pruned.append(_prune(c, batch=2))
        return _slot_rows(db, c) == {0: 2}  # the rate window passed: only the running items' slots

    wait_until(all_free_gone, what="every free slot row pruned")
    assert max(pruned) <= 4
    # The limits hold after the prune: customer 1 is still at its limit, customer 3 is free.
    limited.add_jobs(db.engine, [1, 3])
    assert _customers(db, _claim(db, c, 5)) == {3: 1}


@pytest.mark.parametrize(("first", "expected"), [("customer", [7, 3, 9, 7, 3, 9]), ("parity", [7] * 6)])
def test_turns_follow_the_first_keyed_limit(db: Database, coordinators: list[Coordinator], first: str,
                                            expected: list[int]) -> None:  # fmt: skip
    by_customer = Limit(key=Job.customer, concurrency=100)
    by_parity = Limit(key=Job.customer % 2, concurrency=100)  # every customer here is odd: one key
    c = _build(db, coordinators, [by_customer, by_parity] if first == "customer" else [by_parity, by_customer])
    limited.add_jobs(db.engine, [7] * 50 + [3] * 2 + [9] * 3)
    taken = _claim(db, c, 6)
    with Session(db.engine) as s:
        assert [s.get_one(Job, t.source_id).customer for t in taken] == expected


def test_a_round_on_postgresql_is_three_statements(db: Database, coordinators: list[Coordinator]) -> None:
    """The round lock, the candidate read (with its keys' slot rows), then the slot writes,
    claims and mark in one statement (docs/limits.md, "Cost"): not a statement per slot."""
    if db.backend != "postgresql":
        pytest.skip("one statement per round's writes is PostgreSQL's (taking.limited_round)")
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=2), Limit(key=None, rate=100, per=3600)])
    limited.add_jobs(db.engine, [n % 5 for n in range(20)])
    w = c.registrations()[0]
    _claim(db, c, 1)  # the round row and the statements' first use
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    sa.event.listen(c.engine, "before_cursor_execute", count)
    try:
        taken = _claim(db, c, 6)
    finally:
        sa.event.remove(c.engine, "before_cursor_execute", count)
    assert len(sent) == 3, sent
    assert len(taken) == 6
    assert sorted(_customers(db, taken).values()) == [1, 1, 1, 1, 2]  # turns: one per key, then the next row
    slots_t = slots.slots_table(w.table)
    with db.engine.connect() as conn:
        held = conn.execute(sa.select(slots_t.c.kind, slots_t.c.claim_token).where(slots_t.c.kind >= 0)).all()
    tokens = {t.token for t in taken}
    # every claim holds a slot of each limit under its own token (the first claim's too)
    assert sorted(Counter(kind for kind, token in held if token in tokens).values()) == [6, 6]
