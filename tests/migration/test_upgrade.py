"""A database created by 0.0.1 keeps working: upgrade twice, from many processes, equals a fresh install.

The 0.0.1 layout is spelled out here exactly: ``source_id`` (primary key, foreign key),
``execution_status``, ``claim_token`` String(36), ``lease_expires_at`` (indexed), ``error`` Text.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from dbworker.sql import upgrade
from tests.apps import basic
from tests.conftest import Database
from tests.helpers import wait_until
from tests.integration.conftest import FAST


def old_layout(metadata: sa.MetaData, release: str = "0.0.1") -> sa.Table:
    """``items_work`` exactly as dbworker 0.0.1 created it (0.1.0: plus the status index)."""
    items = sa.Table("items", metadata, sa.Column("id", sa.Integer, primary_key=True))
    status_index = [sa.Index("ix_items_work_execution_status", "execution_status")] if release == "0.1.0" else []
    return sa.Table(
        "items_work",
        metadata,
        sa.Column("source_id", sa.Integer, sa.ForeignKey(items.c.id), primary_key=True, autoincrement=False),
        sa.Column("execution_status", sa.String(16), nullable=False),
        sa.Column("claim_token", sa.String(36)),
        sa.Column("lease_expires_at", sa.DateTime, index=True),
        sa.Column("error", sa.Text),
        *status_index,
    )


def schema(engine: sa.Engine, table: str) -> dict[str, Any]:
    """The reflected layout of ``table``, in comparable form."""
    inspector = sa.inspect(engine)
    return {
        "columns": [
            (c["name"], type(c["type"]).__name__, getattr(c["type"], "length", None), c["nullable"])
            for c in inspector.get_columns(table)
        ],
        "pk": inspector.get_pk_constraint(table)["constrained_columns"],
        # SQLite cannot alter a foreign key: an upgraded table cascades by a trigger instead.
        "fks": sorted(
            (tuple(f["constrained_columns"]), f["referred_table"], _ondelete(engine, f))
            for f in inspector.get_foreign_keys(table)
        ),
        "indexes": sorted(
            (ix["name"], tuple(ix["column_names"]), bool(ix["unique"]))
            for ix in inspector.get_indexes(table)
            if not ix["name"].startswith("items_work_ibfk")  # MariaDB's implicit FK index
            and ix["column_names"] != ["source_id"]
        ),
    }


def _ondelete(engine: sa.Engine, fk: Any) -> str | None:
    return None if engine.dialect.name == "sqlite" else fk["options"].get("ondelete")


def _upgrade_in_process(url: str) -> list[str]:
    c = basic.build(url, app_tables=False, work_tables=False)
    return c.upgrade_worker_tables()


def build_old_database(db: Database, release: str = "0.0.1") -> None:
    basic.create_app_tables(db.engine)
    old = old_layout(sa.MetaData(), release)
    old.create(db.engine)
    with Session(db.engine) as s:
        s.execute(sa.insert(basic.Item), [{"action": "finish"} for _ in range(4)])
        s.execute(
            sa.insert(old),
            [
                {"source_id": 1, "execution_status": "finished", "error": None},
                {"source_id": 2, "execution_status": "failed", "error": "boom"},
                {"source_id": 3, "execution_status": "unfinished", "error": None},
            ],
        )
        s.commit()


@pytest.mark.parametrize("release", ["0.0.1", "0.1.0"])
def test_old_layout_upgrades_to_a_fresh_install_from_many_processes(db: Database, tmp_path: Any, release: str) -> None:
    build_old_database(db, release)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        changes = pool.map(_upgrade_in_process, [db.url] * 4)
    # Each change made by exactly one process: nine columns, four indexes, the history table, dbworker's own
    # tables, the wake-up triggers.
    made = sorted(change for c in changes for change in c)
    assert made == sorted([
        "added column items_work.attempts",
        "added column items_work.claimed_by",
        "added column items_work.ended_at",
        "added column items_work.not_before",
        "added column items_work.traceback",
        "added column items_work.progress_fraction",
        "added column items_work.progress_note",
        "added column items_work.progress_at",
        "added column items_work.changed_at",
        "created items_history",
        *(["added index ix_items_work_execution_status"] if release == "0.0.1" else []),
        "added index ix_items_work_not_before",
        "added index ix_items_work_ended_at",
        "added index ix_items_work_changed_at",
        "added ON DELETE CASCADE on items_work",
        "created dbworker_paused",
        *_wakeup_changes(db.backend),
    ])
    assert _upgrade_in_process(db.url) == []  # a second upgrade is a no-op
    upgraded = schema(db.engine, "items_work")
    fresh_db = tmp_path / "fresh"
    fresh_db.mkdir()
    from tests.conftest import open_database

    gen = open_database(db.backend, fresh_db)
    fresh = next(gen)
    try:
        basic.build(fresh.url)
        assert upgraded == schema(fresh.engine, "items_work")
    finally:
        gen.close()


def _wakeup_changes(backend: str) -> list[str]:
    """What an upgrade reports beside the work tables: the fleet's sweep table, the source's
    trace table (``dbworker.otel``) and the wake-up triggers (on PostgreSQL NOTIFY triggers;
    elsewhere the change table's)."""
    own = ["created dbworker_sweeps", "created dbworker_traces_items"]
    if backend == "postgresql":
        return [*own, "notify trigger on items"]
    return [*own, "created dbworker_changes", "wake-up triggers on items"]


def old_history(metadata: sa.MetaData) -> sa.Table:
    """``items_history`` as the release that added attempt history created it (before its
    ``logs``, ``trace_id`` and ``span_id`` columns)."""
    items = sa.Table("items", metadata, sa.Column("id", sa.Integer, primary_key=True))
    moment = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    return sa.Table(
        "items_history",
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey(items.c.id, ondelete="CASCADE"), nullable=False),
        sa.Column("started_at", moment),
        sa.Column("ended_at", moment, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("traceback", sa.Text),
        sa.Column("claimed_by", sa.String(255)),
        sa.Index("ix_items_history_source_id", "source_id", "id"),
        sa.Index("ix_items_history_ended_at", "ended_at"),
    )


def test_history_table_gains_its_later_columns_and_keeps_its_rows(db: Database, tmp_path: Any) -> None:
    basic.build(db.url)
    with db.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE items_history"))
    old_history(sa.MetaData()).create(db.engine)
    [item] = basic.add_items(db.engine, ["finish"])
    with db.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO items_work (source_id, execution_status, attempts) VALUES (:i, 'failed', 1)"),
                     {"i": item})  # fmt: skip
        conn.execute(sa.text("INSERT INTO items_history (source_id, ended_at, outcome) VALUES (:i, :t, 'retried')"),
                     {"i": item, "t": "2026-01-01 00:00:00"})  # fmt: skip
    c = basic.build(db.url, app_tables=False, work_tables=False)
    assert [x for x in c.upgrade_worker_tables() if "items_history" in x] == [
        "added column items_history.logs",
        "added column items_history.trace_id",
        "added column items_history.span_id",
    ]
    assert c.upgrade_worker_tables() == []
    with Session(db.engine) as s:
        [kept] = c.workers["items"].state(s, item)["history"]  # type: ignore[index]
    assert kept["outcome"] == "retried" and kept["trace_id"] is None and kept["span_id"] is None
    upgraded = schema(db.engine, "items_history")
    fresh_db = tmp_path / "fresh"
    fresh_db.mkdir()
    from tests.conftest import open_database

    gen = open_database(db.backend, fresh_db)
    fresh = next(gen)
    try:
        basic.build(fresh.url)
        assert upgraded == schema(fresh.engine, "items_history")
    finally:
        gen.close()


@pytest.mark.slow
def test_old_database_keeps_working_before_and_after_the_upgrade(db: Database) -> None:
    build_old_database(db)
    c = basic.build(db.url, app_tables=False, work_tables=False, **FAST)
    work = c.workers["items"].table
    assert not upgrade.current(db.engine, work)
    # Before the upgrade: refused at start, naming the fix; nothing was claimed or changed.
    with pytest.raises(
        RuntimeError, match=r"items_work lacks attempts, not_before, traceback, claimed_by, ended_at, progress_fraction, "
        r"progress_note, progress_at, changed_at; items_history does not exist\): run `dbworker migrate"
    ):
        c.start()
    assert c.upgrade_worker_tables() == [
        "added column items_work.attempts",
        "added column items_work.not_before",
        "added column items_work.traceback",
        "added column items_work.claimed_by",
        "added column items_work.ended_at",
        "added column items_work.progress_fraction",
        "added column items_work.progress_note",
        "added column items_work.progress_at",
        "added column items_work.changed_at",
        "added index ix_items_work_changed_at",
        "added index ix_items_work_ended_at",
        "added index ix_items_work_execution_status",
        "added index ix_items_work_not_before",
        "added ON DELETE CASCADE on items_work",
        "created items_history",
        "created dbworker_paused",
        *_wakeup_changes(db.backend),
    ]
    assert upgrade.current(db.engine, work)
    c = basic.build(db.url, app_tables=False, work_tables=False, **FAST)
    c.start()  # the 0.0.1 rows read as never retried, not waiting

    def status(coordinator: Any, item: int) -> ExecutionStatus | None:
        with Session(db.engine) as s:  # a fresh transaction each time (MariaDB reads repeatably)
            return coordinator.execution_status(s, worker="items", source_id=item)  # type: ignore[no-any-return]

    try:
        wait_until(
            lambda: status(c, 4) is ExecutionStatus.FINISHED and status(c, 3) is ExecutionStatus.FINISHED,
            what="unclaimed and unfinished items of the old database to finish",
        )
        assert status(c, 2) is ExecutionStatus.FAILED
        with Session(db.engine) as s:
            assert c.workers["items"].state(s, 2)["error"] == "boom"  # type: ignore[index]
            assert c.workers["items"].state(s, 2)["attempts"] == 0  # type: ignore[index]
            assert s.scalar(sa.select(sa.func.count()).select_from(basic.Output).where(basic.Output.item_id == 1)) == 0
    finally:
        c.stop()
    assert c.upgrade_worker_tables() == []  # a second upgrade is a no-op
    c2 = basic.build(db.url, app_tables=False, work_tables=False, **FAST)
    [new] = basic.add_items(db.engine, ["finish"])
    c2.start()
    try:
        wait_until(lambda: status(c2, new) is ExecutionStatus.FINISHED, what="a new item after the upgrade")
    finally:
        c2.stop()
