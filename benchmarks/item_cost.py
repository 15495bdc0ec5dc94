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
    python -m benchmarks.item_cost --libraries /work/wt/before,. --repeats 3 --probes 30   # interleaved A/B
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa

from benchmarks import procs

ADMIN_URL = os.environ.get("DBWORKER_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
DB = "bench_cost"
APP = "benchmarks.cost_app:coordinator"
ROOT = Path(__file__).resolve().parent.parent


def _url(database: str) -> str:
    return str(sa.engine.make_url(ADMIN_URL).set(database=database).render_as_string(hide_password=False))


def reset(library: Path) -> sa.Engine:
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        conn.execute(sa.text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    engine = sa.create_engine(_url(DB), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("CREATE TABLE fleet_item (id bigint PRIMARY KEY)"))
    env = {**os.environ, "DATABASE_URL": _url(DB), "PYTHONPATH": _pythonpath(library)}
    subprocess.run([sys.executable, "-m", "dbworker", "migrate", APP], check=True, env=env, cwd=library,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return engine


def _pythonpath(library: Path) -> str:
    return f"{library}:{library / 'operator'}"


class Pod:
    def __init__(self, library: Path, log_dir: Path, counts: Path | None, history: str | None = None) -> None:
        env = {"DATABASE_URL": _url(DB), "PYTHONPATH": _pythonpath(library)}
        if history is not None:
            env["DBWORKER_COST_HISTORY"] = history
        if counts is not None:
            env["DBWORKER_COST_COUNTS"] = str(counts)
        self.pod = procs.start_pod([sys.executable, "-m", "dbworker", "run", APP, "--metrics-port", "0"],
                                   env=env, log_path=log_dir / "pod.log", cwd=library)  # fmt: skip

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


class Database:
    """The benchmark's one connection to ``bench_cost``: its own backend is left out of the figures."""

    def __init__(self, engine: sa.Engine) -> None:
        self.conn = engine.connect()
        self.own = int(self.conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
        self.polls = 0  # this connection's own transactions, left out of xacts

    def close(self) -> None:
        self.conn.close()

    def backend_cpu(self) -> float:
        pids = self.conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> :own"),
                                 {"d": DB, "own": self.own}).scalars().all()  # fmt: skip
        self.polls += 1
        total = 0.0
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
        return total

    def xacts(self) -> float:
        self.conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        found = float(self.conn.execute(sa.text(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :d"), {"d": DB}).scalar_one())
        self.polls += 2
        return found - self.polls

    def finished(self) -> int:
        self.polls += 1
        return int(self.conn.execute(sa.text(
            "SELECT count(*) FROM fleet_work WHERE execution_status = 'finished'")).scalar_one())

    def insert(self, first: int, count: int) -> float:
        """Insert keys ``first``.. in one commit; the time (epoch seconds) the commit returned."""
        self.polls += 1
        self.conn.execute(sa.text("INSERT INTO fleet_item SELECT generate_series(CAST(:a AS bigint), CAST(:b AS bigint))"),
                          {"a": first, "b": first + count - 1})  # fmt: skip
        return time.time()

    def wait_finished(self, total: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.finished() < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.finished()} of {total} finished")
            time.sleep(0.05)

    def started_at(self, key: int) -> float:
        """When the item's attempt started (the handler process's clock, naive UTC), epoch seconds."""
        self.polls += 1
        started = self.conn.execute(sa.text("SELECT started_at FROM fleet_history WHERE source_id = :k"),
                                    {"k": key}).scalar_one()  # fmt: skip
        return float(started.replace(tzinfo=dt.UTC).timestamp())


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


def one_run(spec: str, args: argparse.Namespace, spy: Path | None) -> dict[str, float]:
    """A fresh database and pod of ``spec`` (a checkout, ``#on|nologs|off`` after it for the
    attempt history's setting in ``cost_app``): warm up, drain ``args.items``, then pick-ups."""
    path, _, history = spec.partition("#")
    library = Path(path)
    db = Database(reset(library))
    logs = Path(tempfile.mkdtemp(prefix="item-cost-"))
    counts_dir = logs / "counts" if args.count else None
    pod = Pod(library, logs, counts_dir, history or None)
    try:
        db.insert(1, 20)
        db.wait_finished(20, timeout=120)
        time.sleep(1.0)
        next_id = 21
        before_counts = read_counts(counts_dir, pod) if counts_dir else None
        spies = []
        if spy is not None:
            spy.mkdir(parents=True, exist_ok=True)
            for name, pid in [("coordinator", pod.pod.pid)] + [(f"handler-{p.pid}", p.pid) for p in pod.handlers()]:
                spies.append(subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "--format", "raw",
                     "-r", "250", "--nonblocking", "-o", str(spy / f"{name}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            time.sleep(1.0)
        cpu0, db0, tx0, t0 = pod.cpu(), db.backend_cpu(), db.xacts(), time.monotonic()
        db.insert(next_id, args.items)
        next_id += args.items
        db.wait_finished(next_id - 1)
        seconds = time.monotonic() - t0
        cpu1, db1, tx1 = pod.cpu(), db.backend_cpu(), db.xacts()
        for process in spies:
            process.send_signal(2)
        for process in spies:
            process.wait(timeout=60)
        n = args.items
        row = {"items_per_s": n / seconds,
               "coordinator_ms": 1000 * (cpu1["coordinator"] - cpu0["coordinator"]) / n,
               "handlers_ms": 1000 * (cpu1["handlers"] - cpu0["handlers"]) / n,
               "postgres_ms": 1000 * (db1 - db0) / n, "xacts": (tx1 - tx0) / n}  # fmt: skip
        if counts_dir is not None and before_counts is not None:
            time.sleep(0.5)
            after = read_counts(counts_dir, pod)
            for role in after:
                diff = after[role] - before_counts[role]
                print(f"  {library.name} {role}: {sum(diff.values()) / n:.2f} statements, BEGIN, COMMIT per item")
                for kind, value in diff.most_common():
                    if value / n >= 0.01:
                        print(f"    {value / n:6.2f}  {kind}")
        picks = []
        for _ in range(args.probes):
            time.sleep(random.uniform(0.1, 0.4))
            committed = db.insert(next_id, 1)
            next_id += 1
            db.wait_finished(next_id - 1)
            picks.append(1000 * (db.started_at(next_id - 1) - committed))
        if picks:
            picks.sort()
            row["pickup_p50_ms"] = statistics.median(picks)
            row["pickup_p90_ms"] = picks[int(0.9 * (len(picks) - 1))]
        return row
    finally:
        procs.stop_pod(pod.pod)
        db.close()


# The handler's statements one by one, on one connection to ``bench_cost`` after a drain:
# PostgreSQL backend CPU per statement (psutil), ``SELECT 1`` being a bare round trip.
SERVER_STEPS = {
    "SELECT 1 (a bare round trip)": ["SELECT 1"],
    "BEGIN; COMMIT": ["BEGIN", "COMMIT"],
    "BEGIN; load the row; COMMIT": ["BEGIN", "SELECT fleet_item.id FROM fleet_item WHERE fleet_item.id = 7", "COMMIT"],
    "BEGIN; fenced UPDATE (no match); COMMIT": [
        "BEGIN", "UPDATE fleet_work SET execution_status = 'finished', claim_token = NULL, "
        "ended_at = timezone('UTC', statement_timestamp()) WHERE source_id = 7 AND claim_token = 'x' "
        "AND execution_status = 'working'", "COMMIT"],
    "BEGIN; history INSERT; COMMIT": [
        "BEGIN", "INSERT INTO fleet_history (source_id, started_at, ended_at, outcome, claimed_by) "
        "VALUES (7, now(), timezone('UTC', statement_timestamp()), 'finished', 'h:1')", "COMMIT"],
}


def server_split(rounds: int) -> None:
    engine = sa.create_engine(_url(DB), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        backend = psutil.Process(int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()))
        raw: Any = conn.connection.driver_connection
        for name, sqls in SERVER_STEPS.items():
            for sql in sqls:  # warm: plans cached, pages in memory
                raw.execute(sql)
            t0 = backend.cpu_times()
            for _ in range(rounds):
                for sql in sqls:
                    raw.execute(sql)
            t1 = backend.cpu_times()
            ms = 1000 * (t1.user + t1.system - t0.user - t0.system) / rounds
            print(f"  PostgreSQL CPU, {name}: {ms:.3f} ms")
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=0, help="single-row pick-ups after each drain")
    parser.add_argument("--count", action="store_true", help="count statements per item (costs CPU)")
    parser.add_argument("--py-spy", type=Path, help="record py-spy flame data of each process here (first repeat)")
    parser.add_argument("--libraries", default=str(ROOT),
                        help="comma-separated checkouts of dbworker, run interleaved (the first is the baseline); "
                             "'<checkout>#off' runs it with history_attempts=0, '#nologs' with history_logs=False")
    parser.add_argument("--server-split", type=int, default=0, metavar="ROUNDS",
                        help="after the runs, PostgreSQL CPU per handler statement, each ROUNDS times")
    args = parser.parse_args(argv)
    libraries = [str(Path(p.partition("#")[0]).resolve()) + p.partition("#")[1] + p.partition("#")[2]
                 for p in args.libraries.split(",")]  # fmt: skip
    rows: dict[str, list[dict[str, float]]] = {lib: [] for lib in libraries}
    for repeat in range(args.repeats):
        order = libraries[repeat % len(libraries):] + libraries[: repeat % len(libraries)]
        for library in order:
            spy = None if args.py_spy is None or repeat else args.py_spy / Path(library.replace("#", "-")).name
            row = one_run(library, args, spy)
            rows[library].append(row)
            print(f"repeat {repeat + 1} {library}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    medians = {lib: {k: statistics.median(r[k] for r in found) for k in found[0]} for lib, found in rows.items()}
    base = medians[libraries[0]]
    for lib, median in medians.items():
        print(f"median {lib}: " + ", ".join(f"{k} {v:.3f} ({v / base[k]:.2f}x)" if base[k] else f"{k} {v:.3f}"
                                            for k, v in median.items()))  # fmt: skip
    if args.server_split:
        server_split(args.server_split)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
