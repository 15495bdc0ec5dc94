"""The limited drain of ``benchmarks.limits`` on a peer: DBOS queues (issue 29's cost comparison).

DBOS (``pip install dbos``, PostgreSQL) is the Python peer with per-key concurrency across
processes: a queue's ``partition_concurrency`` caps the workflows running at once per
partition key (the ``queue_partition_key`` of each enqueue), like ``Limit(key=...,
concurrency=N)``. It runs in a virtualenv of its own (its pins are not ours)::

    python -m venv /tmp/dbos && /tmp/dbos/bin/pip install dbos==3.4.0
    /tmp/dbos/bin/python benchmarks/limits_dbos.py [--items 2000] [--keys 100] [--per-key 2] [--concurrency 4]

or from ``python -m benchmarks.limits --dbos-python /tmp/dbos/bin/python``. On a fresh
database: one process, ``worker_concurrency`` workflows at once, queues polled every 50 ms;
``--items`` no-op workflows enqueued one by one on a plain queue, then as many over
``--keys`` partition keys on a queue with ``partition_concurrency=--per-key``; each timed
from the first enqueue to the last SUCCESS (DBOS has no bulk enqueue: the enqueues are in
the time, for both queues). Prints items per second of each and their ratio.
"""

from __future__ import annotations

import argparse
import secrets
import time

import sqlalchemy as sa
from dbos import DBOS, SetEnqueueOptions  # type: ignore[import-not-found]


@DBOS.workflow()  # type: ignore[misc]
def noop(i: int) -> int:
    return i


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    server = sa.make_url(args.server).set(drivername="postgresql+psycopg")  # DBOS brings psycopg 3
    database = f"bench_dbos_{secrets.token_hex(4)}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
    url = server.set(database=database)
    engine = sa.create_engine(url)
    DBOS(config={"name": "bench_limits", "run_admin_server": False,
                 "system_database_url": url.set(drivername="postgresql").render_as_string(hide_password=False)})
    DBOS.launch()
    queues = {
        "no limits": DBOS.register_queue("plain", worker_concurrency=args.concurrency, polling_interval_sec=0.05),
        f"partition_concurrency {args.per_key}": DBOS.register_queue(
            "limited", worker_concurrency=args.concurrency, partition_concurrency=args.per_key,
            polling_interval_sec=0.05),
    }
    rates: list[float] = []
    try:
        for label, queue in queues.items():
            partitioned = queue.name == "limited"
            start = time.perf_counter()
            for i in range(args.items):
                with SetEnqueueOptions(queue_partition_key=str(i % args.keys) if partitioned else None):
                    queue.enqueue(noop, i)
            while _succeeded(engine, queue.name) < args.items:
                time.sleep(0.2)
            seconds = time.perf_counter() - start
            rates.append(args.items / seconds)
            print(f"DBOS {label}: {args.items} items over {args.keys} keys in {seconds:.2f} s "
                  f"({rates[-1]:.0f} items/s)", flush=True)
    finally:
        DBOS.destroy()
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.dispose()
    print(f"DBOS limited / unlimited throughput: {rates[1] / rates[0]:.2f}x")
    return 0


def _succeeded(engine: sa.Engine, queue: str) -> int:
    with engine.connect() as conn:
        query = "SELECT count(*) FROM dbos.workflow_status WHERE queue_name = %(q)s AND status = 'SUCCESS'"
        return int(conn.exec_driver_sql(query, {"q": queue}).scalar_one())


if __name__ == "__main__":
    raise SystemExit(main())
