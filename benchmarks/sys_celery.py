"""Celery 5 with Redis as broker: the app its workers load, and the benchmark's adapter.

Used as Celery's docs recommend for reliable work: prefork pool, late acks, prefetch 1,
`-O fair`, no result backend (results ignored). The I/O workload's `io` task runs on an I/O
pool instead (`gevent` or `threads`, the adapter's ``pool``) and writes through a
psycopg_pool of the library's default size shared by the process's greenlets or threads. Completion is read from the broker: nothing
left in the queue list nor in kombu's unacked hash. Celery keeps no history of finished
tasks, so the history workload does not apply to it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import psycopg
import psycopg_pool
import redis
from celery import Celery  # type: ignore[import-untyped]

from benchmarks import io_app, probe
from benchmarks.workloads import Database, Kind

QUEUE = "celery"

app = Celery("bench", broker=probe.redis_url())
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_serializer="json",
    accept_content=["json"],
)

_pg: psycopg.Connection[Any] | None = None
_pg_pool: psycopg_pool.ConnectionPool | None = None
_pg_pool_lock = threading.Lock()


def _pg_conn() -> psycopg.Connection[Any]:
    # One connection per pool child, opened on first use (prefork children are forked).
    global _pg
    if _pg is None:
        _pg = psycopg.connect(probe.pg_dsn(), autocommit=True)
    return _pg


@app.task(name="noop")  # type: ignore[untyped-decorator]
def noop(item: int) -> None:
    return None


@app.task(name="write")  # type: ignore[untyped-decorator]
def write(item: int) -> None:
    _pg_conn().execute("INSERT INTO bench_out (item_id) VALUES (%s)", (item,))


@app.task(name="latency")  # type: ignore[untyped-decorator]
def latency(item: int) -> None:
    probe.handler_started(item)


@app.task(name="io")  # type: ignore[untyped-decorator]
def io(item: int) -> None:
    global _pg_pool
    io_app.fetch_sync(item)
    with _pg_pool_lock:  # one pool per worker process, opened on first use
        if _pg_pool is None:
            _pg_pool = psycopg_pool.ConnectionPool(probe.pg_dsn(), kwargs={"autocommit": True})
    with _pg_pool.connection() as conn:
        conn.execute("INSERT INTO bench_out (item_id) VALUES (%s)", (item,))


TASKS = {"noop": noop, "write": write, "latency": latency, "io": io}


class CelerySystem:
    """Adapter: Redis db 15 is the broker; the write workload writes to PostgreSQL."""

    name = "celery"
    database: Database = "postgresql"
    keeps_history = False

    def __init__(self, *, pg_dsn: str, redis_url: str, concurrency: int, pool: str = "prefork") -> None:
        self._pg_dsn = pg_dsn
        self._pool = pool  # Celery's --pool: prefork (the CPU workloads), gevent or threads (I/O)
        self._redis_url = redis_url
        self._concurrency = concurrency
        self._redis = redis.Redis.from_url(redis_url)
        self._pg: psycopg.Connection[Any] | None = None

    def _db(self) -> psycopg.Connection[Any]:
        if self._pg is None or self._pg.closed:
            self._pg = psycopg.connect(self._pg_dsn, autocommit=True)
        return self._pg

    def reset(self, *, history: int) -> None:
        # history is always 0 here (keeps_history is False)
        self._redis.flushdb()
        db = self._db()
        db.execute("DROP TABLE IF EXISTS bench_out")
        db.execute("CREATE TABLE bench_out (id bigserial PRIMARY KEY, item_id bigint NOT NULL)")

    def pod_command(self, kind: Kind, index: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable, "-m", "celery", "-A", "benchmarks.sys_celery", "worker",
            f"--pool={self._pool}", f"--concurrency={self._concurrency}", "-O", "fair",
            "--loglevel=WARNING", "--without-gossip", "--without-mingle",
            "-n", f"bench{index}@%h",
        ]  # fmt: skip
        env = {"BENCH_PG_DSN": self._pg_dsn, "BENCH_REDIS_URL": self._redis_url}
        return argv, env

    def enqueue(self, items: Sequence[int], kind: Kind) -> None:
        task = TASKS[kind]
        with app.producer_or_acquire() as producer:
            for item in items:
                task.apply_async((item,), producer=producer)

    def outstanding(self, kind: Kind, items: range) -> int:
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(QUEUE)
        pipe.hlen("unacked")
        queued, unacked = pipe.execute()
        return int(queued) + int(unacked)

    def close(self) -> None:
        self._redis.close()
        if self._pg is not None:
            self._pg.close()
