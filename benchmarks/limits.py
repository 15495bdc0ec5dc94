"""Drain with and without limits, side by side in one run (issue 29; docs/limits.md).

``python -m benchmarks.limits [--items 10000] [--keys 100] [--per-key 2] [--concurrency 4]``:
on a fresh PostgreSQL database, drains ``--items`` no-op items spread over ``--keys`` keys,
first with no limits, then with ``Limit(key=customer, concurrency=--per-key)``, and prints
items per second of each and their ratio. Figures as measured on this machine; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import secrets
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from benchmarks import probe
from dbworker import Coordinator, ExecutionStatus, Finished, Limit, Outcome


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "bench_limits_jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[int] = mapped_column()


def handle(job: Job, session: Session) -> Outcome:
    return Finished()


def drain(url: str, *, items: int, keys: int, limits: list[Limit], concurrency: int, name: str) -> float:
    """Seconds from start until every item is FINISHED."""
    engine = sa.create_engine(url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.execute(sa.insert(Job), [{"customer": n % keys} for n in range(items)])
        s.commit()
    c = Coordinator(sessionmaker(engine), database_url=url, poll_seconds=0.05, max_poll_seconds=0.5)
    c.transactional_worker(name=name, source=Job, concurrency=concurrency, limits=limits)(handle)
    c.create_worker_tables()
    start = time.perf_counter()
    c.start()
    try:
        while True:
            with Session(engine) as s:
                if c.workers[name].counts(s)[ExecutionStatus.FINISHED] >= items:
                    return time.perf_counter() - start
            time.sleep(0.2)
    finally:
        c.stop(timeout=30)
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pg-dsn", default=probe.DEFAULT_PG_DSN)
    args = parser.parse_args(argv)
    server = make_url(args.pg_dsn)
    database = f"bench_limits_{secrets.token_hex(4)}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
    url = server.set(database=database).render_as_string(hide_password=False)
    results: dict[str, Any] = {}
    try:
        for label, limits in (("no limits", []), (f"concurrency {args.per_key} per key", [
                Limit(key=Job.customer, concurrency=args.per_key)])):  # fmt: skip
            name = "plain" if not limits else "limited"
            seconds = drain(url, items=args.items, keys=args.keys, limits=limits, concurrency=args.concurrency,
                            name=name)  # fmt: skip
            results[label] = seconds
            print(f"{label}: {args.items} items over {args.keys} keys in {seconds:.2f} s "
                  f"({args.items / seconds:.0f} items/s)", flush=True)  # fmt: skip
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.dispose()
    plain, limited = results.values()
    print(f"limited / unlimited throughput: {plain / limited:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
