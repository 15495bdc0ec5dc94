"""The operator's scale-from-zero query (KEDA's postgresql trigger) counts what is claimable
without walking the history: with 100,000 finished items its plan reads only index entries
past the highest recorded key, and the due and expired records, through indexes.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from dbworker_operator.builders import autoscaling
from dbworker_operator.spec import DatabaseTrigger, SqlSource

from dbworker.sql import dialects, status
from tests.apps import basic
from tests.conftest import Database
from tests.helpers import plan_nodes

HISTORY = 100_000
FRESH, DUE, EXPIRED, WAITING, RUNNING = 7, 3, 2, 4, 5


def test_scaling_query_reads_no_history_and_counts_what_is_claimable(pg: Database) -> None:
    c = basic.build(pg.url)
    table = c.workers["items"].table
    key = basic.Item.__table__.c.id
    with pg.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO items (action, runs, ready, release, priority) "
            f"SELECT 'finish', 1, true, false, 0 FROM generate_series(1, {HISTORY + DUE + EXPIRED + WAITING + RUNNING})"
        )
        conn.exec_driver_sql(f"INSERT INTO items_work (source_id, execution_status) "
                             f"SELECT id, 'finished' FROM items WHERE id <= {HISTORY}")
        # Records past the history: due for another attempt, lease expired, waiting for later, running.
        base = HISTORY
        for count, status_, extra in ((DUE, "unfinished", "NULL, NULL"),
                                      (EXPIRED, "working", "now() at time zone 'UTC' - interval '1 minute', NULL"),
                                      (WAITING, "unfinished", "NULL, now() at time zone 'UTC' + interval '1 hour'"),
                                      (RUNNING, "working", "now() at time zone 'UTC' + interval '1 minute', NULL")):
            conn.exec_driver_sql(
                f"INSERT INTO items_work (source_id, execution_status, lease_expires_at, not_before) "
                f"SELECT g, '{status_}', {extra} FROM generate_series({base + 1}, {base + count}) AS g")
            base += count
        conn.execute(sa.insert(basic.Item), [{"action": "finish"} for _ in range(FRESH)])
        conn.exec_driver_sql("ANALYZE")

    query = autoscaling.claimable_query(DatabaseTrigger("postgresql", "keda", (SqlSource("items", "items", "id"),)))
    with pg.engine.connect() as conn:
        [[plan]] = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + query).scalars().all()
        counted = conn.exec_driver_sql(query).scalar_one()
        exact = status.backlog(conn, table, key, None, cap=HISTORY)
        assert dialects.of(conn).name == "postgresql"
    assert counted == exact == FRESH + DUE + EXPIRED
    nodes = plan_nodes(plan["Plan"])
    scanned = [n for n in nodes if "Relation Name" in n]
    assert {n["Relation Name"] for n in scanned} == {"items", "items_work"}

    def read(node: dict[str, Any]) -> int:
        return int(node.get("Actual Rows", 0) * node.get("Actual Loops", 1))

    # A sequential scan appears only where it stops at once: the empty-work-table branch
    # (a one-time filter, never executed here) and its EXISTS probe (one row).
    assert all(read(n) <= 1 for n in scanned if n["Node Type"] == "Seq Scan"), json.dumps(plan)[:3000]
    rows_read = sum(read(n) for n in scanned)
    assert rows_read < 100, json.dumps(plan)[:3000]  # the history is never walked


def test_scaling_query_counts_every_source_row_of_a_worker_never_run(pg: Database) -> None:
    basic.build(pg.url)
    with pg.engine.begin() as conn:
        conn.execute(sa.insert(basic.Item), [{"action": "finish"} for _ in range(FRESH)])
    query = autoscaling.claimable_query(DatabaseTrigger("postgresql", "keda", (SqlSource("items", "items", "id"),)))
    with pg.engine.connect() as conn:
        assert conn.exec_driver_sql(query).scalar_one() == FRESH


def test_scaling_query_runs_on_each_server_and_matches_the_backlog(db: Database) -> None:
    """The same count on MySQL/MariaDB's dialect of the query (KEDA's mysql trigger)."""
    if db.backend == "sqlite":
        return  # KEDA has no SQLite scaler; a SQLite fleet is one pod
    c = basic.build(db.url)
    table = c.workers["items"].table
    key = basic.Item.__table__.c.id
    with db.engine.begin() as conn:
        conn.execute(sa.insert(basic.Item), [{"action": "finish"} for _ in range(FRESH + 2)])
        conn.execute(sa.insert(table), [{"source_id": 1, "execution_status": "finished"},
                                        {"source_id": 2, "execution_status": "unfinished"}])
    kind = "mysql" if db.backend == "mariadb" else "postgresql"
    query = autoscaling.claimable_query(DatabaseTrigger(kind, "keda", (SqlSource("items", "items", "id"),)))
    with db.engine.connect() as conn:
        counted = conn.exec_driver_sql(query).scalar_one()
        assert counted == status.backlog(conn, table, key, None, cap=1000) == FRESH + 1
