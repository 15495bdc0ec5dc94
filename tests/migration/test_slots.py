"""Limits added to a worker of an existing database: its slots table comes with the upgrade.

A database whose ``jobs`` worker ran without limits has no ``jobs_slots`` table. A pod
registered with limits refuses to start until the upgrade (naming the table and the fix);
the upgrade creates it once from many processes at once, a second is a no-op, the table is
a fresh install's, and claims then keep the limit.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, Limit
from dbworker.sql import claims, dialects
from tests import pooler
from tests.apps import limited
from tests.apps.limited import Job
from tests.conftest import Database, open_database
from tests.migration.test_upgrade import schema


def _with_limits(url: str) -> Coordinator:
    """A pod of the new deploy: ``jobs`` with a limit, its tables left as they are."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    c = Coordinator(sessionmaker(engine), database_url=url, **pooler.coordinator_options(url))
    c.transactional_worker(name="jobs", source=Job, limits=[Limit(key=Job.customer, concurrency=1)])(limited.handle)
    return c


def _upgrade_in_process(url: str) -> list[str]:
    return _with_limits(url).upgrade_worker_tables()


def test_limits_added_to_a_running_worker_get_their_slots_table_from_the_upgrade(db: Database, tmp_path: Any) -> None:
    limited.build(db.url, limits=[]).engine.dispose()  # the worker as it ran before: no limits
    limited.add_jobs(db.engine, [1, 1, 2])
    assert "jobs_slots" not in sa.inspect(db.engine).get_table_names()
    c = _with_limits(db.url)
    with pytest.raises(RuntimeError, match=r"jobs_slots does not exist\): run `dbworker migrate"):
        c.start()
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        changes = pool.map(_upgrade_in_process, [db.url] * 4)
    assert sorted(change for made in changes for change in made) == ["created jobs_slots"]  # by one process
    assert _upgrade_in_process(db.url) == []  # a second upgrade is a no-op
    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    gen = open_database(db.backend, fresh_dir)
    fresh = next(gen)
    try:
        limited.build(fresh.url, limits=[Limit(key=Job.customer, concurrency=1)]).engine.dispose()
        assert schema(db.engine, "jobs_slots") == schema(fresh.engine, "jobs_slots")
    finally:
        gen.close()
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        taken = claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=5, lease_seconds=30,
                             limits=w.limits).taken  # fmt: skip
    assert sorted(t.source_id for t in taken) == [1, 3]  # one of customer 1, one of customer 2
    c.engine.dispose()
