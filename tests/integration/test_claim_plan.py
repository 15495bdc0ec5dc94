"""Claim cost does not grow with history: PostgreSQL's plans for the claim path use indexes.

With 100,000 finished items, a claim that sweeps from its cursor reads only rows at and
after the cursor, through the primary-key indexes of both tables.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from dbworker.sql import attempts, claims, dialects, statements
from tests.apps import basic
from tests.conftest import Database
from tests.helpers import plan_nodes

HISTORY = 100_000


def test_claim_plan_reads_no_history(pg: Database) -> None:
    c = basic.build(pg.url)
    table = c.workers["items"].table
    key = basic.Item.__table__.c.id
    with pg.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO items (action, runs, ready, release, priority) "
            f"SELECT 'finish', 1, true, false, 0 FROM generate_series(1, {HISTORY})"
        )
        conn.exec_driver_sql("INSERT INTO items_work (source_id, execution_status) SELECT id, 'finished' FROM items")
        conn.execute(sa.insert(basic.Item), [{"action": "finish"} for _ in range(10)])
        conn.exec_driver_sql("ANALYZE")
    with pg.engine.connect() as conn:
        caps = dialects.of(conn)
        query = (
            statements.claimable(table, key, statements.eligible_query(None, key), caps, after=HISTORY)
            .order_by(key)
            .limit(2)
            .with_for_update(skip_locked=True, of=key.table)
        )
        sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
        [[plan]] = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql).scalars().all()
    nodes = plan_nodes(plan["Plan"])
    scans = {(n["Node Type"], n.get("Relation Name")) for n in nodes if "Relation Name" in n}
    assert ("Seq Scan", "items_work") not in scans and ("Seq Scan", "items") not in scans, scans
    assert {rel for _, rel in scans} == {"items", "items_work"}
    assert all(t.startswith("Index") for t, _ in scans), scans
    rows_read = sum(n.get("Actual Rows", 0) * n.get("Actual Loops", 1) for n in nodes if "Relation Name" in n)
    assert rows_read < 100, json.dumps(plan)[:2000]  # the history is never walked


def test_every_round_of_a_claim_on_one_connection_is_one_statement(pg: Database) -> None:
    # The loop claims rows named by notifications, then sweeps, on one connection. Each
    # round must be the one autocommitted statement: the sweep had fallen back to separate
    # statements, in autocommit, whose row locks ended with each statement.
    c = basic.build(pg.url)
    table = c.workers["items"].table
    key = basic.Item.__table__.c.id
    ids = basic.add_items(pg.engine, ["finish"] * 4)
    statements: list[str] = []

    @sa.event.listens_for(pg.engine, "before_cursor_execute")
    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        statements.append(statement)

    with pg.engine.connect() as conn:
        named = claims.claim(conn, table=table, key=key, eligible=None, limit=1, lease_seconds=30, keys=[str(ids[2])])
        swept = claims.claim(conn, table=table, key=key, eligible=None, limit=2, lease_seconds=30)
    assert [c.source_id for c in named.taken] == [ids[2]]
    assert [c.source_id for c in swept.taken] == ids[:2]
    assert len(statements) == 2, statements


def test_due_times_are_read_through_the_not_before_index(pg: Database) -> None:
    # 100,000 finished items and a few waiting ones: the loop's due-time lookup reads the
    # not_before index (finished rows have none), not the history.
    c = basic.build(pg.url)
    with pg.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO items (action, runs, ready, release, priority) "
            f"SELECT 'finish', 1, true, false, 0 FROM generate_series(1, {HISTORY})"
        )
        conn.exec_driver_sql("INSERT INTO items_work (source_id, execution_status) SELECT id, 'finished' FROM items")
        conn.exec_driver_sql(
            "UPDATE items_work SET execution_status = 'unfinished', not_before = now() + interval '1 hour' "
            "WHERE source_id <= 5"
        )
        conn.exec_driver_sql("ANALYZE")
    table = c.workers["items"].table
    with pg.engine.connect() as conn:
        due = attempts.due(conn, table, 64)
        query = sa.select(table.c.source_id).where(table.c.not_before.is_not(None)).order_by(table.c.not_before).limit(64)
        sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
        [[plan]] = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql).scalars().all()
    assert sorted(k for k, _ in due) == [1, 2, 3, 4, 5] and all(3500 < s <= 3600 for _, s in due)
    nodes = plan_nodes(plan["Plan"])
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], json.dumps(plan)[:2000]
    assert {n.get("Index Name") for n in nodes} >= {"ix_items_work_not_before"}, json.dumps(plan)[:2000]
    # The loop's lookup (the pause and the waiting items in one statement) too, as it is sent.
    sent: list[tuple[str, Any]] = []
    with pg.engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", lambda *a: sent.append((a[2], a[3])))
        paused, waiting = attempts.lookup(conn, table, "items", 64, overdue=60)
    assert not paused and sorted(k for k, _ in waiting) == [1, 2, 3, 4, 5]
    [(statement, parameters)] = [(s, p) for s, p in sent if "dbworker_paused" in s]
    with pg.engine.connect() as conn:
        [[plan]] = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters).scalars().all()
    nodes = plan_nodes(plan["Plan"])
    # (dbworker_paused holds a row per paused worker: a scan of it is a scan of a few rows.)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] != "dbworker_paused"], json.dumps(plan)[:2000]
    assert {n.get("Index Name") for n in nodes} >= {"ix_items_work_not_before"}, json.dumps(plan)[:2000]
