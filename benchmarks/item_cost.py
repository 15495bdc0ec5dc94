"""Where a no-op item's cost goes: CPU per item of the pod's coordinator process, of its handler
processes and of the PostgreSQL backends serving them, statements and transactions per item,
and (``--py-spy``) where the Python time goes.

One `dbworker run benchmarks.cost_app:coordinator` pod (one no-op worker, concurrency 2) on
its own database `bench_cost`; for each repeat, ``--items`` rows are inserted in one commit
and drained, then ``--probes`` single rows are picked up one at a time after idle gaps.
Usage (see benchmarks/README.md, "Where an item's cost goes")::

    python -m benchmarks.item_cost --items 4000 --repeats 3
    python -m benchmarks.item_cost --items 4000 --repeats 1 --count        # statements per item
    python -m benchmarks.item_cost --items 20000 --repeats 1 --py-spy /tmp/cost-prof
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import sqlalchemy as sa

from benchmarks import procs

ADMIN_URL = os.environ.get("DBWORKER_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
DB = "bench_cost"
APP = "benchmarks.cost_app:coordinator"
ROOT = Path(__file__).resolve().parent.parent


def _url(database: str) -> str:
    return str(sa.engine.make_url(ADMIN_URL).set(database=database).render_as_string(hide_password=False))


def reset() -> sa.Engine:
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        conn.execute(sa.text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    engine = sa.create_engine(_url(DB), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("CREATE TABLE fleet_item (id bigint PRIMARY KEY)"))
    env = {**os.environ, "DATABASE_URL": _url(DB)}
    subprocess.run([sys.executable, "-m", "dbworker", "migrate", APP], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return engine


class Pod:
    def __init__(self, log_dir: Path, counts: Path | None) -> None:
        env = {"DATABASE_URL": _url(DB), "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
        if counts is not None:
            env["DBWORKER_COST_COUNTS"] = str(counts)
        self.pod = procs.start_pod([sys.executable, "-m", "dbworker", "run", APP, "--metrics-port", "0"],
                                   env=env, log_path=log_dir / "pod.log", cwd=ROOT)  # fmt: skip

    def handlers(self) -> list[psutil.Process]:
        found = []
        for proc in self.pod.tree()[1:]:
            with contextlib.suppress(psutil.Error):
                if "resource_tracker" not in " ".join(proc.cmdline()):
                    found.append(proc)
        return found

    def cpu(self) -> dict[str, float]:
        root = psutil.Process(self.pod.pid).cpu_times()
        handlers = 0.0
        for proc in self.handlers():
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                handlers += t.user + t.system
        return {"coordinator": root.user + root.system, "handlers": handlers}


def backend_cpu(engine: sa.Engine) -> float:
    with engine.connect() as conn:
        pids = conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"),
                            {"d": DB}).scalars().all()  # fmt: skip
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def xacts(engine: sa.Engine) -> float:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        return float(conn.execute(sa.text(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :d"), {"d": DB}).scalar_one())


def finished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM fleet_work WHERE execution_status = 'finished'")).scalar_one())


def insert(engine: sa.Engine, first: int, count: int) -> None:
    with engine.connect() as conn:
        conn.execute(sa.text("INSERT INTO fleet_item SELECT generate_series(CAST(:a AS bigint), CAST(:b AS bigint))"), {"a": first, "b": first + count - 1})


def wait_finished(engine: sa.Engine, total: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while finished(engine) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {finished(engine)} of {total} finished")
        time.sleep(0.01)


def read_counts(directory: Path, pod: Pod) -> dict[str, collections.Counter[str]]:
    """Statement counts by role: the pod's root process, its handler processes."""
    handler_pids = {p.pid for p in pod.handlers()}
    roles: dict[str, collections.Counter[str]] = {"coordinator": collections.Counter(), "handlers": collections.Counter()}
    for path in directory.glob("*.json"):
        pid = int(path.stem)
        role = "coordinator" if pid == pod.pod.pid else "handlers" if pid in handler_pids else None
        if role is not None:
            with contextlib.suppress(ValueError):
                roles[role].update(json.loads(path.read_text()))
    return roles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=0, help="single-row pick-ups after the drains")
    parser.add_argument("--count", action="store_true", help="count statements per item (costs CPU)")
    parser.add_argument("--py-spy", type=Path, help="record py-spy flame data of each process here")
    args = parser.parse_args(argv)
    engine = reset()
    logs = Path(tempfile.mkdtemp(prefix="item-cost-"))
    counts_dir = logs / "counts" if args.count else None
    pod = Pod(logs, counts_dir)
    try:
        next_id = 1
        insert(engine, next_id, 20)
        next_id += 20
        wait_finished(engine, 20, timeout=60)
        time.sleep(1.0)
        rows = []
        for repeat in range(args.repeats):
            before_counts = read_counts(counts_dir, pod) if counts_dir else None
            cpu0, db0, tx0, t0 = pod.cpu(), backend_cpu(engine), xacts(engine), time.monotonic()
            spies = []
            if args.py_spy is not None and repeat == 0:
                args.py_spy.mkdir(parents=True, exist_ok=True)
                for name, pid in [("coordinator", pod.pod.pid)] + [(f"handler-{p.pid}", p.pid) for p in pod.handlers()]:
                    spies.append(subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "--format", "raw",
                         "-r", "250", "--nonblocking", "-o", str(args.py_spy / f"{name}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
                time.sleep(1.0)
                cpu0, db0, tx0, t0 = pod.cpu(), backend_cpu(engine), xacts(engine), time.monotonic()
            insert(engine, next_id, args.items)
            next_id += args.items
            wait_finished(engine, next_id - 1)
            seconds = time.monotonic() - t0
            cpu1, db1, tx1 = pod.cpu(), backend_cpu(engine), xacts(engine)
            for spy in spies:
                spy.send_signal(2)
            for spy in spies:
                spy.wait(timeout=30)
            n = args.items
            row = {"items_per_s": n / seconds,
                   "coordinator_ms": 1000 * (cpu1["coordinator"] - cpu0["coordinator"]) / n,
                   "handlers_ms": 1000 * (cpu1["handlers"] - cpu0["handlers"]) / n,
                   "postgres_ms": 1000 * (db1 - db0) / n, "xacts": (tx1 - tx0) / n}  # fmt: skip
            rows.append(row)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
            if counts_dir is not None and before_counts is not None:
                time.sleep(0.5)
                after = read_counts(counts_dir, pod)
                for role in after:
                    diff = after[role] - before_counts[role]
                    total = sum(v for k, v in diff.items())
                    print(f"  {role}: {total / n:.2f} statements+transaction ends per item")
                    for kind, value in diff.most_common():
                        if value / n >= 0.01:
                            print(f"    {value / n:6.2f}  {kind}")
        print("median: " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}" for k in rows[0]))
        if args.probes:
            lat = []
            for _ in range(args.probes):
                time.sleep(0.3)
                t = time.perf_counter()
                insert(engine, next_id, 1)
                next_id += 1
                wait_finished(engine, next_id - 1)
                lat.append(1000 * (time.perf_counter() - t))
            lat.sort()
            print(f"pick-up to finished (incl. 10 ms polling of this script): p50 {statistics.median(lat):.1f} ms")
    finally:
        procs.stop_pod(pod.pod)
        print(f"logs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
