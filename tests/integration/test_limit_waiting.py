"""Items waiting only on a limit (docs/limits.md): how many, and the keys most behind, as
``inspect``, the console and the ``dbworker_limit_waiting_items`` gauge read them."""

from __future__ import annotations

import random
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, Limit
from dbworker.sql import claims, dialects, items
from dbworker.sql.waiting import WaitingKey
from tests.apps import limited
from tests.apps.limited import Job
from tests.conftest import Database


def _build(db: Database, made: list[Coordinator], limits: list[Limit], **settings: Any) -> Coordinator:
    c = limited.build(db.url, limits=limits, **settings)
    made.append(c)
    return c


def _claim(c: Coordinator, limit: int) -> list[items.Claim]:
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        return claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=limit,
                            lease_seconds=30, limits=w.limits).taken  # fmt: skip


def _waiting(c: Coordinator, cap: int = 1000, top: int = 10) -> Any:
    found = c.workers["jobs"].waiting_on_limit(c.engine, cap=cap, top=top)
    assert found is not None
    return found


def test_waiting_counts_what_the_backlog_leaves_out_and_names_the_keys(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=2)])
    limited.add_jobs(db.engine, [1] * 10 + [2] * 3 + [3])
    before = _waiting(c)
    # Nothing runs: two of customer 1, two of 2 and the one of 3 could start.
    assert (before.count, before.capped) == (14 - 5, False)
    assert before.keys == (WaitingKey("1", 8, 0), WaitingKey("2", 1, 0))
    taken = _claim(c, 5)
    assert len(taken) == 5
    after = _waiting(c)
    # Running: 2 of customer 1, 2 of 2, 1 of 3; claimable: 8 of 1 and 1 of 2, none can start.
    assert after.count == 9 and after.count + c.backlog("jobs") == 9
    assert after.keys == (WaitingKey("1", 8, 2), WaitingKey("2", 1, 2))
    assert _waiting(c, top=1).keys == (WaitingKey("1", 8, 2),)
    capped = _waiting(c, cap=3)
    assert capped.capped and capped.count == 3


def test_a_worker_without_a_keyed_limit_counts_but_names_no_key(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(concurrency=3)])
    limited.add_jobs(db.engine, [1, 2, 3, 4, 5])
    assert (_waiting(c).count, _waiting(c).keys) == (2, ())
    _claim(c, 5)
    assert (_waiting(c).count, c.backlog("jobs")) == (2, 0)


def test_a_rate_limit_counts_starts_in_its_period_as_held(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [Limit(key=Job.customer, rate=2, per=3600)])
    limited.add_jobs(db.engine, [7] * 5)
    taken = _claim(c, 5)
    assert len(taken) == 2
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        for claim in taken:
            items.finish(conn, w.table, claim)
        conn.commit()
    found = _waiting(c)
    # The rate's round looks at two per key; its starts in the period are shown as held.
    assert found.keys == (WaitingKey("7", 1, 2),)


def test_random_mixes_agree_with_the_backlog(db: Database, coordinators: list[Coordinator]) -> None:
    rng = random.Random(29)
    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=2), Limit(concurrency=6)])
    customers = [rng.randrange(6) for _ in range(60)]
    limited.add_jobs(db.engine, customers)
    _claim(c, rng.randrange(1, 8))
    found = _waiting(c)
    t = c.workers["jobs"].table
    with Session(db.engine) as s:
        running = s.scalar(sa.select(sa.func.count()).select_from(t).where(t.c.execution_status == "working"))
    assert found.count + c.backlog("jobs") == 60 - running
    assert all(k.held <= 2 for k in found.keys)
    assert [k.waiting for k in found.keys] == sorted((k.waiting for k in found.keys), reverse=True)


def test_a_worker_without_limits_has_nothing_waiting_on_one(db: Database, coordinators: list[Coordinator]) -> None:
    c = _build(db, coordinators, [])
    assert not c.workers["jobs"].limited
    assert c.workers["jobs"].waiting_on_limit(c.engine, cap=10) is None


def test_the_gauge_reads_the_count_by_worker(db: Database, coordinators: list[Coordinator]) -> None:
    from prometheus_client import CollectorRegistry

    from dbworker.pod import metrics, run

    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [1, 1, 1, 2])
    registry = CollectorRegistry()
    m = metrics.WorkerMetrics(registry, version="0")
    sampler = metrics.BacklogSampler(c.backlog, m, ["jobs"], interval=15,
                                     waiting=lambda name, cap: run.waiting_count(c, name, cap=cap))  # fmt: skip
    sampler.sample_once()
    assert registry.get_sample_value("dbworker_limit_waiting_items", {"worker": "jobs"}) == 2
    assert registry.get_sample_value("dbworker_backlog", {"worker": "jobs"}) == 2


def test_inspect_shows_the_column_and_the_keys(db: Database, coordinators: list[Coordinator]) -> None:
    from dbworker.pod import admin

    c = _build(db, coordinators, [Limit(key=Job.customer, concurrency=1)])
    limited.add_jobs(db.engine, [5, 5, 5, 6, 6])
    _claim(c, 5)
    [entry] = admin.inspect_report(c, ["jobs"], failed=False)
    assert (entry["waiting_on_limit"], entry["waiting_on_limit_capped"], entry["claimable"]) == (3, False, 0)
    assert entry["limit_keys"] == [{"key": "5", "waiting": 2, "held": 1}, {"key": "6", "waiting": 1, "held": 1}]
    assert admin.render_table([entry]).splitlines()[1].split()[-1] == "3"
