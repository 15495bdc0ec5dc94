"""With a long finished history the console's reads go through indexes: no sort of the
history, no count of it, on SQLite, PostgreSQL and MariaDB. Plans are read with EXPLAIN;
no duration is asserted.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from dbworker.sql import browse
from tests.acceptance import app as taskapp
from tests.acceptance.conftest import AppDb
from tests.console.conftest import ClientFactory

HISTORY = 50_000


def _fill(appdb: AppDb) -> sa.Table:
    appdb.create_worker_tables()
    table = appdb.coordinator.workers["main"].table
    with appdb.db.engine.begin() as conn:
        for start in range(1, HISTORY + 1, 10_000):
            ids = range(start, min(start + 10_000, HISTORY + 1))
            conn.execute(sa.insert(taskapp.Task), [{"id": i, "kind": "main", "action": "finish", "seconds": 0.0, "result": None} for i in ids])
            conn.execute(sa.insert(table), [{"source_id": i, "execution_status": "finished" if i % 500 else "failed"} for i in ids])
    with appdb.db.engine.begin() as conn:
        if appdb.backend == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {table.name}")
        elif appdb.backend == "mariadb":
            conn.exec_driver_sql(f"ANALYZE TABLE {table.name}")
        else:
            conn.exec_driver_sql("ANALYZE")
    return table


def _plan(conn: sa.Connection, query: sa.Select, backend: str) -> str:  # type: ignore[type-arg]
    sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
    if backend == "sqlite":
        return " | ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    if backend == "postgresql":
        return json.dumps(conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {sql}").scalar())
    return " | ".join(" ".join(str(v) for v in r) for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))


def test_item_pages_read_the_history_through_an_index(make_client: ClientFactory, appdb_all: AppDb) -> None:
    table = _fill(appdb_all)
    backend = appdb_all.backend
    with appdb_all.db.engine.connect() as conn:
        for statuses in ([], ["finished"], ["failed"]):
            page = browse.page(conn, table, statuses=statuses, limit=50)
            assert len(page.rows) == 50 and page.more
            plan = _plan(conn, browse.page_query(table, statuses=statuses, limit=50), backend)
            assert "TEMP B-TREE" not in plan.upper(), (statuses, plan)  # SQLite: no sort
            assert "filesort" not in plan, (statuses, plan)  # MariaDB: no sort
            if backend == "postgresql" and statuses != ["failed"]:
                assert '"Node Type": "Sort"' not in plan, (statuses, plan)
            if backend == "postgresql" and statuses == ["failed"]:
                assert "ix_main_work_execution_status" in plan, plan  # only the failed rows are sorted
    # The pages themselves over that history.
    client = make_client()
    assert client.get("/").status_code == 200
    finished = client.get("/workers/main?status=finished")
    assert finished.status_code == 200 and f'data-id="{HISTORY - 1}"' in finished.text
    assert "Older items" in finished.text
    failed = client.get("/workers/main?status=failed").text
    assert f'data-id="{HISTORY}"' in failed and 'data-id="25000"' not in failed  # the 50 newest of 100
