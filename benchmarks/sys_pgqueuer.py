"""PgQueuer: the factory its workers load (`pgq run`), and the benchmark's adapter.

Used as its docs recommend: async entrypoints on an asyncpg connection, its own worker loop
(`pgqueuer.run(factory)`, what `pgq run` calls, on uvloop as `pgq run` does; the `pgq run`
command itself fails at start with typer 0.29), LISTEN/NOTIFY on. Concurrency 2 per
pod is PgQueuer's per-worker cap `--max-concurrent-tasks 2`, which requires
`--batch-size 1` (the cap must be at least twice the batch); the I/O workload (many jobs in
flight) keeps PgQueuer's default batch of 10. A finished job leaves the queue
table for `pgqueuer_log`, so completion is "no row left in the queue" and history is
pre-populated as log rows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pgqueuer
import psycopg
import uvloop
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

from benchmarks import io_app, probe
from benchmarks.workloads import Database, Kind

ENTRYPOINTS: tuple[Kind, ...] = ("noop", "write", "latency", "io")
# The handlers' write pool (asyncpg), per process: 2 for two handlers; 4 for many jobs in
# flight, psycopg_pool's default size, which procrastinate's worker and Celery's io task use.
WRITE_POOL = {"write": 2, "io": 4}


@contextlib.asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[PgQueuer]:
    """The worker factory (`pgq run benchmarks.sys_pgqueuer:create_pgqueuer`)."""
    connection = await asyncpg.connect(probe.pg_dsn())
    pgq = PgQueuer.from_asyncpg_connection(connection)
    # Handlers write through their own small pool: the worker's connection is busy dequeuing.
    pool: asyncpg.Pool | None = None

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    pool_lock = asyncio.Lock()  # many jobs may find no pool at once: one creates it

    async def insert(kind: Kind, item: int) -> None:
        nonlocal pool
        async with pool_lock:
            if pool is None:
                pool = await asyncpg.create_pool(probe.pg_dsn(), min_size=1, max_size=WRITE_POOL[kind])
        await pool.execute("INSERT INTO bench_out (item_id) VALUES ($1)", item)

    @pgq.entrypoint("write")
    async def write(job: Job) -> None:
        await insert("write", int(job.payload or b"0"))

    @pgq.entrypoint("io")
    async def io(job: Job) -> None:
        item = int(job.payload or b"0")
        await io_app.fetch(item)
        await insert("io", item)

    @pgq.entrypoint("latency")
    async def latency(job: Job) -> None:
        probe.handler_started(int(job.payload or b"0"))

    try:
        yield pgq
    finally:
        if pool is not None:
            await pool.close()
        await connection.close()


class PgQueuerSystem:
    """Adapter: enqueues in batches with PgQueuer's Queries over one asyncpg connection."""

    name = "pgqueuer"
    database: Database = "postgresql"
    keeps_history = True

    def __init__(self, *, pg_dsn: str, concurrency: int, batch_size: int = 1) -> None:
        self._pg_dsn = pg_dsn
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._loop = asyncio.new_event_loop()
        self._aconn: asyncpg.Connection | None = None
        self._queries: Queries | None = None
        self._db: psycopg.Connection[Any] | None = None

    def _conn(self) -> psycopg.Connection[Any]:
        if self._db is None or self._db.closed:
            self._db = psycopg.connect(self._pg_dsn, autocommit=True)
        return self._db

    def _q(self) -> Queries:
        if self._queries is None or self._aconn is None or self._aconn.is_closed():
            self._aconn = self._loop.run_until_complete(asyncpg.connect(self._pg_dsn))
            self._queries = Queries(AsyncpgDriver(self._aconn))
        return self._queries

    def reset(self, *, history: int) -> None:
        db = self._conn()
        db.execute("DROP SCHEMA public CASCADE")
        db.execute("CREATE SCHEMA public")
        db.execute("CREATE TABLE bench_out (id bigserial PRIMARY KEY, item_id bigint NOT NULL)")
        self._loop.run_until_complete(self._q().install())
        if history:
            # A long-running deployment's trace: successful jobs in the log, already
            # folded into statistics.
            db.execute(
                "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, aggregated) "
                "SELECT g, 'successful', 0, 'noop', true FROM generate_series(1, %s) AS g",
                (history,),
            )
            db.execute("SELECT setval('pgqueuer_id_seq', %s)", (history,))
            db.execute("ANALYZE")

    def pod_command(self, kind: Kind, index: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable, "-m", "benchmarks.sys_pgqueuer",
            "--batch-size", str(self._batch_size), "--max-concurrent-tasks", str(self._concurrency),
        ]  # fmt: skip
        return argv, {"BENCH_PG_DSN": self._pg_dsn, "PGDSN": self._pg_dsn}

    def enqueue(self, items: Sequence[int], kind: Kind) -> None:
        queries = self._q()
        self._loop.run_until_complete(
            queries.enqueue(
                [kind] * len(items),
                [str(item).encode() for item in items],
                [0] * len(items),
            )
        )

    def outstanding(self, kind: Kind, items: range) -> int:
        # Earlier batches are complete before a later one is measured, so whatever is left
        # in the queue table belongs to ``items``.
        row = self._conn().execute(
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = %s", (kind,)
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        if self._aconn is not None:
            self._loop.run_until_complete(self._aconn.close())
        self._loop.close()
        if self._db is not None:
            self._db.close()


def main() -> None:
    """A pod: PgQueuer's worker loop over `create_pgqueuer`, stopped by SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-concurrent-tasks", type=int, default=0)
    args = parser.parse_args()
    uvloop.run(
        pgqueuer.run(
            create_pgqueuer,
            batch_size=args.batch_size,
            max_concurrent_tasks=args.max_concurrent_tasks or None,
        )
    )


if __name__ == "__main__":
    main()
