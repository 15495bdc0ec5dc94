"""The application deletes its own rows: the delete always goes through and takes every
worker's records of the row with it, whatever state they were in, and nothing dbworker reads
(status calls, ``backlog()``, ``inspect``, the console, the autoscaling count) sees it after.

On SQLite both with the application's connections turning foreign keys on (``PRAGMA
foreign_keys=ON``) and with SQLite's default (off); on tables created by this release and on
tables of 0.0.1 and 0.1.0 after the upgrade.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus
from dbworker.console import queries
from dbworker.contract import now
from dbworker.pod import admin
from tests import pooler
from tests.apps import basic
from tests.conftest import Database
from tests.migration.test_upgrade import build_old_database

LATER = now() + dt.timedelta(hours=1)
EARLIER = now() - dt.timedelta(hours=1)
# One record of each state an item can rest in; ``running`` is a claim whose pod died.
RECORDS: dict[str, dict[str, Any]] = {
    "finished": {"execution_status": "finished", "attempts": 1, "ended_at": EARLIER},
    "failed": {"execution_status": "failed", "attempts": 3, "error": "boom", "ended_at": EARLIER},
    "retry_wait": {"execution_status": "unfinished", "attempts": 1, "error": "flaky", "not_before": LATER},
    "due_wait": {"execution_status": "unfinished", "attempts": 0, "not_before": LATER},
    "claimable_again": {"execution_status": "unfinished", "attempts": 1, "not_before": EARLIER},
    "dead_claim": {"execution_status": "working", "claim_token": "t", "lease_expires_at": EARLIER, "attempts": 1},
}


def _app_engine(db: Database, foreign_keys: bool) -> sa.Engine:
    """The application's own engine; on SQLite with ``PRAGMA foreign_keys`` as asked."""
    engine = sa.create_engine(db.url, **pooler.engine_options(db.url))
    if db.backend == "sqlite":
        pragma = f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}"
        sa.event.listen(engine, "connect", lambda conn, _record: conn.execute(pragma))
    return engine


def _coordinator(db: Database, *, work_tables: bool = True) -> Coordinator:
    c = basic.build(db.url, work_tables=False)
    c.transactional_worker(name="then", source=basic.Item)(basic.handle_then)
    if work_tables:
        c.create_worker_tables()
    return c


def _record_everything(c: Coordinator, engine: sa.Engine) -> dict[str, int]:
    """A source row per state with both workers' records in that state, and one row never
    claimed; returns the state's row ids (``fresh``: the unclaimed one)."""
    ids = dict(zip([*RECORDS, "fresh"], basic.add_items(engine, ["finish"] * (len(RECORDS) + 1)), strict=True))
    with Session(engine) as s:
        for worker in ("items", "then"):
            table = c.workers[worker].table
            for state, record in RECORDS.items():
                s.execute(sa.insert(table).values(source_id=ids[state], **record))
        s.commit()
    return ids


def _delete_rows(engine: sa.Engine, ids: list[int]) -> None:
    with Session(engine) as s:
        s.execute(sa.delete(basic.Item).where(basic.Item.id.in_(ids)))
        s.commit()


def _records(c: Coordinator, engine: sa.Engine, worker: str) -> list[int]:
    table = c.workers[worker].table
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(table.c.source_id)).scalars())


def _claimable_count(db: Database, worker: str) -> int | None:
    """The autoscaling trigger's claimable count (KEDA runs it on PostgreSQL and MySQL only)."""
    if db.backend == "sqlite":
        return None
    from dbworker_operator.builders.autoscaling import claimable_query
    from dbworker_operator.spec import DatabaseTrigger, SqlSource

    kind = "postgresql" if db.backend == "postgresql" else "mysql"
    query = claimable_query(DatabaseTrigger(kind, "url", (SqlSource(worker, "items", "id"),)))
    with db.engine.connect() as conn:
        return int(conn.exec_driver_sql(query).scalar_one())


def _assert_unseen(db: Database, c: Coordinator, deleted: list[int], left: list[int]) -> None:
    """Nothing dbworker reads sees the deleted rows; ``left`` are the rows still there."""
    for worker in ("items", "then"):
        assert _records(c, db.engine, worker) == [], worker
        view = c.workers[worker]
        with Session(db.engine) as s:
            assert all(n == 0 for n in view.counts(s).values()), view.counts(s)
            assert view.failed(s) == []
            assert all(view.state(s, i) is None for i in deleted)
            assert all(c.execution_status(s, worker=worker, source_id=i) is None for i in deleted)
        assert c.backlog(worker) == len(left)
        if (count := _claimable_count(db, worker)) is not None:
            assert count == len(left)
        [report] = admin.inspect_report(c, [worker], failed=True)
        assert report["counts"] == {s.value: 0 for s in ExecutionStatus}
        assert report["claimable"] == len(left)
        assert report["failed"] == []
        [summary] = [w for w in queries.overview(c) if w.name == worker]
        assert summary.counts == {s.value: 0 for s in ExecutionStatus}
        assert summary.failed_last_hour == 0
        assert summary.running == []
        rows, _more = queries.items(c, worker, status=None)
        assert rows == []
        assert all(queries.item(c, worker, i) is None for i in deleted)


@pytest.mark.parametrize("foreign_keys", [True, False], ids=["foreign_keys_on", "foreign_keys_off"])
def test_deleting_source_rows_takes_every_workers_records_with_them(db: Database, foreign_keys: bool) -> None:
    if db.backend != "sqlite" and not foreign_keys:
        pytest.skip("only SQLite lets a connection turn foreign keys off")
    c = _coordinator(db)
    engine = _app_engine(db, foreign_keys)
    ids = _record_everything(c, engine)
    deleted = [ids[state] for state in RECORDS]
    _delete_rows(engine, deleted)
    _assert_unseen(db, c, deleted, left=[ids["fresh"]])
    # A new row is new work (on SQLite it may reuse a deleted row's key).
    _delete_rows(engine, [ids["fresh"]])
    [new] = basic.add_items(engine, ["finish"])
    with Session(engine) as s:
        assert c.execution_status(s, worker="items", source_id=new) is None
    assert c.backlog("items") == 1


@pytest.mark.parametrize("release", ["0.0.1", "0.1.0"])
def test_rows_of_an_upgraded_database_can_be_deleted(db: Database, release: str) -> None:
    build_old_database(db, release)  # items 1-4; records of 1 (finished), 2 (failed), 3 (unfinished)
    engine = _app_engine(db, foreign_keys=True)
    with pytest.raises(sa.exc.IntegrityError):  # the old layout's key refuses it
        _delete_rows(engine, [1])
    c = _coordinator(db, work_tables=False)
    assert "added ON DELETE CASCADE on items_work" in c.upgrade_worker_tables()
    assert c.upgrade_worker_tables() == []  # idempotent
    _delete_rows(engine, [1, 2, 3])
    _assert_unseen(db, c, [1, 2, 3], left=[4])


def test_dropping_a_work_table_leaves_the_sources_deletes_working(db: Database) -> None:
    c = _coordinator(db)
    engine = _app_engine(db, foreign_keys=True)
    ids = _record_everything(c, engine)
    for worker in ("items", "then"):
        c.workers[worker].table.drop(engine)  # on SQLite its delete trigger goes with it
    _delete_rows(engine, list(ids.values()))
    with Session(engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(basic.Item)) == 0
