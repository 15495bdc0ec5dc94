"""procrastinate: the app its workers load, and the benchmark's adapter.

Used as its docs recommend: async tasks, its own worker (`procrastinate worker
--concurrency=2`, LISTEN/NOTIFY on), schema applied with its schema manager. Completion is
the job's `succeeded` status; history is pre-populated as succeeded jobs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import procrastinate
import psycopg
from procrastinate.types import JSONValue

from benchmarks import io_app, probe
from benchmarks.workloads import Database, Kind

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=probe.pg_dsn()))


@app.task(name="noop")
async def noop(item: int) -> None:
    return None


@app.task(name="write")
async def write(item: int) -> None:
    # The worker's own pool, as a procrastinate task touching the same database would.
    await app.connector.execute_query_async(
        "INSERT INTO bench_out (item_id) VALUES (%(item)s)", item=item
    )


@app.task(name="latency")
async def latency(item: int) -> None:
    probe.handler_started(item)


@app.task(name="io")
async def io(item: int) -> None:
    await io_app.fetch(item)
    await app.connector.execute_query_async(
        "INSERT INTO bench_out (item_id) VALUES (%(item)s)", item=item
    )


TASKS = {"noop": noop, "write": write, "latency": latency, "io": io}


class ProcrastinateSystem:
    """Adapter: the benchmark defers with the sync API and reads job statuses."""

    name = "procrastinate"
    database: Database = "postgresql"
    keeps_history = True

    def __init__(self, *, pg_dsn: str, concurrency: int) -> None:
        self._pg_dsn = pg_dsn
        self._concurrency = concurrency
        self._db: psycopg.Connection[Any] | None = None
        self._opened = False
        self._jobs: dict[int, int] = {}  # item -> job id (ids grow with enqueue order)

    def _conn(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed:
            self._db = psycopg.connect(self._pg_dsn, autocommit=True)
        return self._db

    def reset(self, *, history: int) -> None:
        self._close_app()
        self._jobs.clear()
        db = self._conn()
        db.execute("DROP SCHEMA public CASCADE")
        db.execute("CREATE SCHEMA public")
        db.execute("CREATE TABLE bench_out (id bigserial PRIMARY KEY, item_id bigint NOT NULL)")
        db.execute(app.schema_manager.get_schema())
        if history:
            # What a long-running deployment holds: succeeded jobs (their events come from
            # procrastinate's own insert trigger).
            db.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts) "
                "SELECT 'default', 'noop', jsonb_build_object('item', g), 'succeeded', 1 "
                "FROM generate_series(1, %s) AS g",
                (history,),
            )
            db.execute("ANALYZE")
        app.open()
        self._opened = True

    def pod_command(self, kind: Kind, index: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable, "-m", "procrastinate", "--app=benchmarks.sys_procrastinate.app",
            "worker", f"--concurrency={self._concurrency}", f"--name=bench{index}",
        ]  # fmt: skip
        return argv, {"BENCH_PG_DSN": self._pg_dsn, "PROCRASTINATE_VERBOSITY": "0"}

    def enqueue(self, items: Sequence[int], kind: Kind) -> None:
        kwargs: list[dict[str, JSONValue]] = [{"item": item} for item in items]
        ids = TASKS[kind].batch_defer(*kwargs)
        self._jobs.update(zip(items, ids, strict=True))

    def outstanding(self, kind: Kind, items: range) -> int:
        row = self._conn().execute(
            "SELECT count(*) FROM procrastinate_jobs "
            "WHERE id BETWEEN %s AND %s AND status = 'succeeded'",
            (self._jobs[items[0]], self._jobs[items[-1]]),
        ).fetchone()
        done = int(row[0]) if row else 0
        return len(items) - done

    def _close_app(self) -> None:
        if self._opened:
            app.close()
            self._opened = False

    def close(self) -> None:
        self._close_app()
        if self._db is not None:
            self._db.close()
