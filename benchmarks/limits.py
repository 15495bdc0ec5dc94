"""Drain and pick-up with and without limits, side by side in one run (issue 29; docs/limits.md).

``python -m benchmarks.limits [--items 10000] [--keys 100] [--per-key 2] [--concurrency 4]
[--probes 30] [--repeat 1]``: on a fresh PostgreSQL database, drains ``--items`` no-op items
spread over ``--keys`` keys, with no limits and with ``Limit(key=customer,
concurrency=--per-key)`` (in turns, ``--repeat`` times each), and prints items per second of
each and their ratio. Then, on the idle worker, ``--probes`` single items of a key that is
free, one at a time 0.1-0.3 s apart: the pick-up, from the insert's commit to the handler's
first line (its ``time.time()`` written to the row), p50 of each and the difference. Figures
as measured on this machine; nothing is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import secrets
import statistics
import subprocess
import time
from pathlib import Path
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
    started: Mapped[float | None] = mapped_column(sa.Double(), nullable=True)  # pick-up probes only
    probe: Mapped[bool] = mapped_column(default=False)


def handle(job: Job, session: Session) -> Outcome:
    if job.probe:
        job.started = time.time()
    return Finished()


def _coordinator(url: str, name: str, concurrency: int, per_key: int) -> Coordinator:
    """The benchmark's coordinator: one worker over ``Job``, limited to ``per_key`` per customer (0: no limits)."""
    limits = [Limit(key=Job.customer, concurrency=per_key)] if per_key else []
    c = Coordinator(sessionmaker(sa.create_engine(url)), database_url=url, poll_seconds=0.05, max_poll_seconds=0.5)
    c.transactional_worker(name=name, source=Job, concurrency=concurrency, limits=limits)(handle)
    return c


def serve(url: str, name: str, concurrency: int, per_key: int, started: Any, stop: Any) -> None:
    """A pod: the coordinator in a process of its own until ``stop`` is set; ``started`` gets
    the time its start began."""
    c = _coordinator(url, name, concurrency, per_key)
    started.value = time.time()
    c.start()
    try:
        stop.wait()
    finally:
        c.stop(timeout=30)


def drain(
    url: str, *, items: int, keys: int, per_key: int, concurrency: int, name: str, probes: int, in_process: bool
) -> tuple[float, float, list[float]]:
    """Seconds from start until every item is FINISHED, the same from the first item's end
    (the start of the pod left out: the server's times of the first and last outcome, scaled
    to every item), then ``probes`` pick-ups (seconds).

    The coordinator runs in a process of its own, as in a pod; ``in_process``: in this one, as
    before 2026-12-03, where the probes' polling of the database shares its interpreter (each
    of the claim's round trips may then wait for the GIL, up to the 5 ms switch interval).
    """
    engine = sa.create_engine(url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.execute(sa.insert(Job), [{"customer": n % keys} for n in range(items)])
        s.commit()
    c = _coordinator(url, name, concurrency, per_key)
    c.create_worker_tables()
    ctx = multiprocessing.get_context("spawn")
    started, stop = ctx.Value("d", 0.0), ctx.Event()
    pod = None if in_process else ctx.Process(target=serve, args=(url, name, concurrency, per_key, started, stop))
    if pod is None:
        started.value = time.time()
        c.start()
    else:
        pod.start()
    try:
        while True:
            with Session(engine) as s:
                if started.value and c.workers[name].counts(s)[ExecutionStatus.FINISHED] >= items:
                    seconds = time.time() - started.value
                    break
            time.sleep(0.2)
        work = c.workers[name].table
        with engine.connect() as conn:  # the server's times of the first and last outcome
            first, last = conn.execute(sa.select(sa.func.min(work.c.ended_at), sa.func.max(work.c.ended_at))).one()
        steady = (last - first).total_seconds() * items / max(items - 1, 1)
        return seconds, steady, [pick_up(engine, keys + n) for n in range(probes)]
    finally:
        if pod is None:
            c.stop(timeout=30)
        else:
            stop.set()
            pod.join(60)
        engine.dispose()


def pick_up(engine: sa.Engine, customer: int) -> float:
    """One item of a key no item holds: seconds from its insert's commit to its handler's start."""
    time.sleep(random.uniform(0.1, 0.3))
    with Session(engine) as s:
        job = Job(customer=customer, probe=True)
        s.add(job)
        s.commit()
        committed = time.time()
        job_id = job.id
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with Session(engine) as s:
            started = s.scalar(sa.select(Job.started).where(Job.id == job_id))
        if started is not None:
            return started - committed
        time.sleep(0.005)
    raise RuntimeError(f"probe {job_id} was not picked up in 30 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--probes", type=int, default=30, help="pick-up probes per configuration")
    parser.add_argument("--repeat", type=int, default=1, help="drains per configuration, in turns")
    parser.add_argument("--pg-dsn", default=probe.pg_dsn(), help="a server; the run makes its own database")
    parser.add_argument("--in-process", action="store_true",
                        help="run the coordinator in this process (as before 2026-12-03), not in one of its own")
    parser.add_argument("--dbos-python", help="a Python with dbos installed: also run benchmarks/limits_dbos.py")
    args = parser.parse_args(argv)
    server = make_url(args.pg_dsn)
    database = f"bench_limits_{secrets.token_hex(4)}"
    # The server's maintenance database, not the DSN's (which need not exist).
    admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
    url = server.set(database=database).render_as_string(hide_password=False)
    configs = {"no limits": 0, f"concurrency {args.per_key} per key": args.per_key}
    rates: dict[str, list[float]] = {label: [] for label in configs}
    steady_rates: dict[str, list[float]] = {label: [] for label in configs}
    pick_ups: dict[str, list[float]] = {label: [] for label in configs}
    try:
        for n in range(args.repeat):
            for label, per_key in configs.items():
                seconds, steady, probes = drain(url, items=args.items, keys=args.keys, per_key=per_key,
                                        concurrency=args.concurrency, name="limited" if per_key else "plain",
                                        probes=args.probes, in_process=args.in_process)  # fmt: skip
                rates[label].append(args.items / seconds)
                steady_rates[label].append(args.items / steady)
                pick_ups[label] += probes
                pick = f"; pick-up p50 {statistics.median(probes) * 1000:.1f} ms" if probes else ""
                print(f"[{n + 1}] {label}: {args.items} items over {args.keys} keys in {seconds:.2f} s "
                      f"({args.items / seconds:.0f} items/s; {args.items / steady:.0f} items/s from the first end){pick}",
                      flush=True)  # fmt: skip
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.dispose()
    plain, limited = (statistics.median(r) for r in rates.values())
    print(f"limited / unlimited throughput (medians): {limited / plain:.2f}x")
    plain, limited = (statistics.median(r) for r in steady_rates.values())
    print(f"limited / unlimited throughput from the first end (medians): {limited / plain:.2f}x")
    if args.probes:
        p_plain, p_limited = (statistics.median(p) * 1000 for p in pick_ups.values())
        print(f"pick-up p50 of a free key: {p_limited:.1f} ms limited, {p_plain:.1f} ms unlimited "
              f"({p_limited - p_plain:+.1f} ms)")  # fmt: skip
    if args.dbos_python:  # the peer, after ours, on the same server (benchmarks/limits_dbos.py)
        peer = Path(__file__).with_name("limits_dbos.py")
        subprocess.run([args.dbos_python, str(peer), "--items", str(args.items), "--keys", str(args.keys),
                        "--per-key", str(args.per_key), "--concurrency", str(args.concurrency),
                        "--server", admin.url.render_as_string(hide_password=False)], check=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
