"""`python -m benchmarks.idle_fleet`: what an idle fleet of `dbworker run` pods costs the database.

For each configuration (`default`: plain `upgrade_worker_tables()`; `no-triggers`: its
opt-out, `upgrade_worker_tables(wakeup_triggers=False)`), each history size and each pod
count: the `bench` database is wiped and filled with server-side SQL (the source rows, and
a FINISHED record of each in both workers' `<name>_work` tables), a window with no pods
measures the server's own background CPU, then N `dbworker run benchmarks.idle_app:coordinator`
processes are started (each in its own process group, its own /readyz port), the benchmark
waits until every one is ready, lets them settle, and measures over a window:

- the database server's CPU: utime+stime of every server process (PostgreSQL: the postmaster,
  its children, and the children it reaped during the window; MariaDB: mariadbd), as % of
  one core, minus the no-pod window's; the server is shared with other engineers' tests, so
  on PostgreSQL the CPU of the backends connected to `bench` is printed too (it excludes
  them);
- transactions/s (PostgreSQL: pg_stat_database.xact_commit of `bench`; MariaDB: the
  server's `Questions`) and rows read/s (tup_returned + tup_fetched; MariaDB:
  Handler_read_*), the history walks;
- pg_stat_statements' calls and execution time for `bench`, when the extension is loaded;
- the pods' own CPU (their process trees) per pod.

Every process started here is stopped at the end, also on error, SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
import psycopg
import pymysql
from sqlalchemy import MetaData, create_engine
from sqlalchemy.engine import make_url

from benchmarks import procs, sys_dbworker

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
APP = "benchmarks.idle_app:coordinator"
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/bench"
DEFAULT_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/bench"
CONFIGS = ("default", "no-triggers")
READY_TIMEOUT = 120.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.idle_fleet",
        description="Database CPU of N idle `dbworker run` pods over a finished history.",
    )
    parser.add_argument("--pods", default="1,5,20", help="pod counts (comma-separated)")
    parser.add_argument("--history", default="100000,1000000",
                        help="finished items per worker (comma-separated)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="dbworker configurations: default, no-triggers")
    parser.add_argument("--databases", default="postgresql", help="postgresql,mariadb")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured per point")
    parser.add_argument("--windows", type=int, default=1,
                        help="consecutive windows per point (the median is printed)")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds between the last pod's readiness and the window")
    parser.add_argument("--base-port", type=int, default=19100,
                        help="pod i serves /readyz on base-port + i")
    parser.add_argument("--connection-reserve", type=int, default=20,
                        help="PostgreSQL connections left free for others (fewer pods if needed)")
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="also start N pods of another checkout's dbworker in the same window "
                             "(PostgreSQL): each side's backends (by client port) and pods, apart")
    args = parser.parse_args(argv)  # fmt: skip
    args.pod_counts = sorted({int(v) for v in args.pods.split(",") if v})
    args.histories = [int(v) for v in args.history.split(",") if v]
    args.config_list = [v for v in args.configs.split(",") if v]
    args.database_list = [v for v in args.databases.split(",") if v]
    for c in args.config_list:
        if c not in CONFIGS:
            parser.error(f"--configs: unknown {c}; choose from {', '.join(CONFIGS)}")
    for d in args.database_list:
        if d not in ("postgresql", "mariadb"):
            parser.error(f"--databases: unknown {d}; choose from postgresql, mariadb")
    if not args.pod_counts or min(args.pod_counts) < 1 or args.window <= 0 or args.windows < 1:
        parser.error("--pods must be positive counts, --window and --windows positive")
    return args


# ---- the database server -----------------------------------------------------------------


class PgServer:
    """PostgreSQL on this host: its processes' CPU and `bench`'s statistics."""

    name = "postgresql"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.url = make_url(dsn).set(drivername="postgresql+psycopg").render_as_string(
            hide_password=False
        )
        admin = make_url(dsn).set(database="postgres").render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            db = make_url(dsn).database
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                conn.execute(f'CREATE DATABASE "{db}"')
        self.conn = psycopg.connect(dsn, autocommit=True)
        backend = int(self._one("SELECT pg_backend_pid()"))
        self.postmaster = psutil.Process(psutil.Process(backend).ppid())
        self.max_connections = int(self._one("SHOW max_connections"))
        preload = str(self._one("SHOW shared_preload_libraries"))
        self.statements = "pg_stat_statements" in preload
        if self.statements:
            try:
                self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            except psycopg.Error:
                self.statements = False

    def _one(self, sql: str) -> Any:
        row = self.conn.execute(sql).fetchone()
        return row[0] if row else None

    def wipe(self) -> None:
        with self.conn.transaction():
            self.conn.execute("DROP SCHEMA public CASCADE")
            self.conn.execute("CREATE SCHEMA public")

    def fill(self, history: int) -> None:
        """Source rows 1..history (every other one of the ordered worker's kind), before the
        work tables exist (so no wake-up trigger fires)."""
        self.conn.execute(
            "INSERT INTO idle_item (id, kind, priority) SELECT g, CASE WHEN g %% 2 = 0 THEN 'b' "
            "ELSE 'a' END, g %% 1000 FROM generate_series(1, %s) AS g",
            (history,),
        )

    def fill_work(self, history: int) -> None:
        """FINISHED records: every row for `unordered`, the kind-'b' rows for `ordered`."""
        for worker, where in (("unordered", ""), ("ordered", "WHERE g %% 2 = 0")):
            self.conn.execute(
                f"INSERT INTO {worker}_work (source_id, execution_status) "
                f"SELECT g, 'finished' FROM generate_series(1, %s) AS g {where}",
                (history,),
            )
        self.conn.execute("VACUUM ANALYZE")
        # Write the fill's dirty pages now, not during a measured window.
        self.conn.execute("CHECKPOINT")

    def processes(self) -> list[psutil.Process]:
        try:
            return [self.postmaster, *self.postmaster.children()]
        except psutil.NoSuchProcess as exc:
            raise RuntimeError("the PostgreSQL server restarted during the window") from exc

    def bench_pids(self) -> set[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
        return {int(r[0]) for r in rows}

    def connections(self) -> tuple[int, int]:
        """(client connections to the whole server, to `bench`), this one left out."""
        row = self.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE datname = current_database()) "
            "FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def counters(self) -> dict[str, float]:
        row = self.conn.execute(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
        out = {"transactions": float(row[0]), "rows_read": float(row[1])} if row else {}
        if self.statements:
            st = self.conn.execute(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) "
                "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                "WHERE datname = current_database())"
            ).fetchone()
            if st:
                out["statements"] = float(st[0])
                out["statement_ms"] = float(st[1])
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


class MariaDbServer:
    """MariaDB on this host: mariadbd's CPU and the server's global status counters."""

    name = "mariadb"
    statements = False

    def __init__(self, url: str) -> None:
        self.url = url
        my = make_url(url)
        self._params: dict[str, Any] = {"host": my.host, "port": my.port or 3306,
                                        "user": my.username, "password": my.password or ""}  # fmt: skip
        self.database = str(my.database)
        conn = pymysql.connect(**self._params)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
        conn.close()
        self.conn = pymysql.connect(**self._params, database=self.database, autocommit=True)
        found = [p for p in psutil.process_iter(["name"]) if p.info["name"] in ("mariadbd", "mysqld")]
        if len(found) != 1:
            raise RuntimeError(f"expected one mariadbd process, found {len(found)}")
        self.server = found[0]
        self.max_connections = int(self._one("SELECT @@max_connections"))
        self._engine = create_engine(url)

    def _one(self, sql: str, args: Any = None) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone()
        return row[0] if row else None

    def _exec(self, sql: str, args: Any = None) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)

    def wipe(self) -> None:
        with self._engine.begin() as conn:
            meta = MetaData()
            meta.reflect(conn)
            meta.drop_all(conn)
        self._engine.dispose()

    def fill(self, history: int) -> None:
        # MariaDB's sequence engine: seq_1_to_<n> is a table of 1..n.
        self._exec(
            f"INSERT INTO idle_item (id, kind, priority) SELECT seq, IF(seq % 2 = 0, 'b', 'a'), "
            f"seq % 1000 FROM seq_1_to_{int(history)}"
        )

    def fill_work(self, history: int) -> None:
        for worker, where in (("unordered", ""), ("ordered", "WHERE seq % 2 = 0")):
            self._exec(
                f"INSERT INTO {worker}_work (source_id, execution_status, attempts) "
                f"SELECT seq, 'finished', 0 FROM seq_1_to_{int(history)} {where}"
            )
        self._exec("ANALYZE TABLE idle_item, unordered_work, ordered_work")

    def processes(self) -> list[psutil.Process]:
        return [self.server]

    def bench_pids(self) -> set[int]:
        return set()  # one process for every session: the server's CPU is all there is

    def connections(self) -> tuple[int, int]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT count(*), sum(DB = %s) FROM information_schema.PROCESSLIST "
                        "WHERE COMMAND <> 'Daemon'", (self.database,))  # fmt: skip
            row = cur.fetchone()
        return (int(row[0]) - 1, int(row[1] or 0) - 1) if row else (0, 0)

    def counters(self) -> dict[str, float]:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name = 'Questions' "
                        "OR Variable_name LIKE 'Handler_read%%'")  # fmt: skip
            rows = {str(k): float(v) for k, v in cur.fetchall()}
        return {
            "transactions": rows.get("Questions", 0.0),
            "rows_read": sum(v for k, v in rows.items() if k.startswith("Handler_read")),
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        self._engine.dispose()


Server = PgServer | MariaDbServer


def cpu_by_pid(server: Server) -> tuple[dict[int, float], float]:
    """CPU seconds of each server process, and what the first one reaped from dead children."""
    out: dict[int, float] = {}
    reaped = 0.0
    for index, proc in enumerate(server.processes()):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
            if index == 0 and server.name == "postgresql":
                reaped = t.children_user + t.children_system
    return out, reaped


def measure_window(server: Server, seconds: float, pods: Sequence[procs.Pod]) -> dict[str, float]:
    """One window: server CPU (all processes; `bench`'s backends), counters, pods' CPU."""
    counters0 = server.counters()
    bench0 = server.bench_pids()
    cpu0, reaped0 = cpu_by_pid(server)
    pods0 = sum(procs.tree_cpu_seconds(p) for p in pods)
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1, reaped1 = cpu_by_pid(server)
    elapsed = time.monotonic() - t0
    pods1 = sum(procs.tree_cpu_seconds(p) for p in pods)
    bench1 = server.bench_pids()
    counters1 = server.counters()
    for pod in pods:
        if not pod.alive():
            raise RuntimeError(f"a pod exited during the window; log {pod.log_path}:\n{pod.log_tail(8)}")
    total = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items()) + (reaped1 - reaped0)
    bench = sum(cpu1.get(pid, 0.0) - cpu0.get(pid, 0.0) for pid in bench0 | bench1 if pid in cpu1)
    out = {
        "seconds": elapsed,
        "server_cpu_pct": 100.0 * total / elapsed,
        "bench_backends_cpu_pct": 100.0 * bench / elapsed,
        "pods_cpu_pct_per_pod": (100.0 * (pods1 - pods0) / elapsed / len(pods)) if pods else 0.0,
    }
    for key in counters1:
        if key in counters0:
            out[f"{key}_per_s"] = (counters1[key] - counters0[key]) / elapsed
    return out


# ---- the pods ------------------------------------------------------------------------------


def start_pods(server: Server, count: int, base_port: int, log_dir: Path, tag: str,
               root: Path = ROOT) -> list[procs.Pod]:  # fmt: skip
    """``count`` pods of the dbworker in ``root`` (this checkout, or ``--against``'s)."""
    pods = []
    for index in range(count):
        port = base_port + index
        argv = [sys.executable, "-m", "dbworker", "run", APP, "--metrics-port", str(port),
                "--metrics-host", "127.0.0.1"]  # fmt: skip
        env = {"DATABASE_URL": server.url, "PYTHONPATH": f"{root}{os.pathsep}{root / 'operator'}"}
        pods.append(procs.start_pod(argv, env=env, log_path=log_dir / f"{tag}-pod{index}.log",
                                    cwd=root))  # fmt: skip
    return pods


def measure_sides(server: PgServer, seconds: float, sides: dict[str, list[procs.Pod]]) -> dict[str, dict[str, float]]:
    """One window over pods of two checkouts running together: per side, the CPU of the
    `bench` backends serving its pods (matched by client port) and of its pods, per pod."""
    port = make_url(server.url).port or 5432

    def backends() -> dict[str, set[int]]:
        rows = server.conn.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = "
                                   "current_database() AND pid <> pg_backend_pid()").fetchall()  # fmt: skip
        ports = {name: set().union(*(procs.tree_ports(p, port) for p in pods)) for name, pods in sides.items()}
        return {name: {int(pid) for pid, client in rows if client in mine} for name, mine in ports.items()}

    served = backends()
    cpu0, _ = cpu_by_pid(server)
    pods0 = {name: sum(procs.tree_cpu_seconds(p) for p in pods) for name, pods in sides.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    cpu1, _ = cpu_by_pid(server)
    out = {}
    for name, pods in sides.items():
        backend = sum(cpu1[pid] - cpu0.get(pid, 0.0) for pid in served[name] if pid in cpu1)
        pod = sum(procs.tree_cpu_seconds(p) for p in pods) - pods0[name]
        out[name] = {"backends_cpu_pct_per_pod": 100.0 * backend / elapsed / len(pods),
                     "pods_cpu_pct_per_pod": 100.0 * pod / elapsed / len(pods), "backends": len(served[name])}  # fmt: skip
    return out


def wait_ready(pods: Sequence[procs.Pod], base_port: int, timeout: float = READY_TIMEOUT) -> float:
    """Wait until every pod's /readyz answers 200; seconds it took."""
    t0 = time.monotonic()
    waiting = dict(enumerate(pods))
    while waiting:
        for index, pod in list(waiting.items()):
            if not pod.alive():
                raise RuntimeError(f"pod {index} exited ({pod.process.returncode}); log "
                                   f"{pod.log_path}:\n{pod.log_tail(10)}")  # fmt: skip
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{base_port + index}/readyz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        del waiting[index]
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{len(waiting)} pods not ready after {timeout:.0f}s "
                               f"(first: {next(iter(waiting.values())).log_path})")  # fmt: skip
        time.sleep(0.25)
    return time.monotonic() - t0


def stop_pods(pods: Sequence[procs.Pod]) -> None:
    """TERM every pod at once, then stop each (KILL of its group after the grace)."""
    for pod in pods:
        pod.tree()
        if pod.alive():
            with contextlib.suppress(ProcessLookupError):
                pod.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15.0
    for pod in pods:
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        # Gone: stop_pod only kills leftovers of its group; still there: KILL of the group.
        procs.stop_pod(pod, grace=0.0)


# ---- the run -------------------------------------------------------------------------------


def prepare(server: Server, config: str, history: int) -> dict[str, Any]:
    """Wipe `bench`, create the tables the application's way, fill the history."""
    from benchmarks import idle_app

    t0 = time.monotonic()
    server.wipe()
    engine = create_engine(server.url)
    try:
        idle_app.Base.metadata.create_all(engine)
    finally:
        engine.dispose()
    server.fill(history)
    # The work tables and (per configuration) the wake-up triggers, in a separate process as an
    # init container would run them.
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.idle_fleet", "--migrate", config],
        env={**os.environ, "DATABASE_URL": server.url}, cwd=str(ROOT),
        capture_output=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"migrate failed: {done.stderr.decode()[-2000:]}")
    info: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    server.fill_work(history)
    info["fill_seconds"] = round(time.monotonic() - t0, 1)
    return info


def _migrate_main(config: str) -> None:
    from benchmarks import idle_app

    print(json.dumps(sys_dbworker.migrate(idle_app.coordinator, config)), flush=True)


def library_fingerprint() -> str:
    """A short hash of dbworker's sources as the pods import them (the checkout may change)."""
    digest = hashlib.sha1()
    for path in sorted((ROOT / "dbworker").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def _median(values: Sequence[dict[str, float]]) -> dict[str, float]:
    keys = set().union(*values) if values else set()
    return {k: statistics.median(v[k] for v in values if k in v) for k in keys}


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--migrate":
        _migrate_main(sys.argv[2])
        return 0
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = args.out / "logs" / f"idle-{stamp}"
    print(f"idle fleet {stamp}: configs {args.config_list}, history {args.histories}, pods "
          f"{args.pod_counts}, window {args.window:.0f}s x {args.windows}, settle {args.settle:.0f}s; "
          f"logs in {log_dir}", flush=True)  # fmt: skip
    points: list[dict[str, Any]] = []
    pods: list[procs.Pod] = []
    failed: list[str] = []
    load_start = os.getloadavg()
    started = time.monotonic()
    try:
        for database in args.database_list:
            server: Server = PgServer(args.pg_dsn) if database == "postgresql" else MariaDbServer(
                args.mariadb_url
            )
            per_pod_conns: float | None = None
            try:
                for config in args.config_list:
                    for history in args.histories:
                        try:
                            info = prepare(server, config, history)
                        except Exception as exc:
                            failed.append(f"{database} {config} history {history}: prepare: {exc}")
                            print(f"  FAILED: {failed[-1]}", flush=True)
                            continue
                        time.sleep(args.settle)
                        base = _median([measure_window(server, args.window, [])
                                        for _ in range(args.windows)])  # fmt: skip
                        print(f"{database} {config} history {history:,} (filled in "
                              f"{info['fill_seconds']} s, wakeup_triggers keyword: "
                              f"{info['wakeup_triggers_keyword']}): no pods: server "
                              f"{base['server_cpu_pct']:.2f}% of a core", flush=True)  # fmt: skip
                        for wanted in args.pod_counts:
                            count = wanted
                            if per_pod_conns:
                                total, mine = server.connections()
                                room = server.max_connections - args.connection_reserve - total
                                count = max(1, min(wanted, int(room // per_pod_conns)))
                            tag = f"{database}-{config}-h{history}-n{count}"
                            point: dict[str, Any] = {
                                "library": library_fingerprint(),
                                "database": database, "config": config, "history": history,
                                "pods_wanted": wanted, "pods": count, "migrate": info,
                                "baseline": base,
                            }  # fmt: skip
                            try:
                                pods = start_pods(server, count, args.base_port, log_dir, tag)
                                point["ready_seconds"] = round(wait_ready(pods, args.base_port), 1)
                                if args.against is not None and isinstance(server, PgServer):
                                    other = start_pods(server, count, args.base_port + count, log_dir,
                                                       f"{tag}-against", root=args.against)  # fmt: skip
                                    mine_pods, pods = pods, pods + other
                                    wait_ready(other, args.base_port + count)
                                    time.sleep(args.settle)
                                    sides = [measure_sides(server, args.window, {"this": mine_pods, "against": other})
                                             for _ in range(args.windows)]  # fmt: skip
                                    point["sides"] = sides
                                    for name in ("this", "against"):
                                        print(f"  {count} pods of {name}: " + ", ".join(
                                            f"backends {w[name]['backends_cpu_pct_per_pod']:.3f}% and pods "
                                            f"{w[name]['pods_cpu_pct_per_pod']:.3f}% of a core per pod"
                                            for w in sides), flush=True)  # fmt: skip
                                    continue
                                time.sleep(args.settle)
                                total, mine = server.connections()
                                point["bench_connections"] = mine
                                if database == "postgresql":
                                    per_pod_conns = max(per_pod_conns or 0.0, mine / count)
                                windows = [measure_window(server, args.window, pods)
                                           for _ in range(args.windows)]  # fmt: skip
                                point["windows"] = windows
                                point["figures"] = fig = _median(windows)
                                fig["db_cpu_pct"] = fig["server_cpu_pct"] - base["server_cpu_pct"]
                                points.append(point)
                                print("  " + _line(point), flush=True)
                            except Exception as exc:
                                failed.append(f"{tag}: {type(exc).__name__}: {exc}")
                                print(f"  FAILED: {failed[-1]}", flush=True)
                            finally:
                                stop_pods(pods)
                                pods = []
                        # The server's background again (autovacuum, other engineers' tests): the
                        # figures subtract the mean of the windows before and after the pods.
                        after = _median([measure_window(server, args.window, [])
                                         for _ in range(args.windows)])  # fmt: skip
                        print(f"  no pods again: server {after['server_cpu_pct']:.2f}% of a core",
                              flush=True)  # fmt: skip
                        for p in points:
                            if (p["database"], p["config"], p["history"]) == (database, config, history):
                                p["baseline_after"] = after
                                p["figures"]["db_cpu_pct"] = p["figures"]["server_cpu_pct"] - (
                                    base["server_cpu_pct"] + after["server_cpu_pct"]) / 2.0
            finally:
                server.close()
    except KeyboardInterrupt:
        print("interrupted: reporting the points so far", file=sys.stderr)
    finally:
        stop_pods(pods)
    table = render(points, args)
    print()
    print(table)
    if failed:
        print(f"\n{len(failed)} point(s) failed:\n  " + "\n  ".join(failed))
    versions = sorted({str(p["library"]) for p in points})
    if len(versions) > 1:
        print(f"\nWARNING: dbworker's source changed during this run ({', '.join(versions)}): "
              "the points mix library versions.")  # fmt: skip
    load_end = os.getloadavg()
    print(f"\nload average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end "
          f"(shared 2-core machine: other engineers' tests run on the same servers)")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"idle-{stamp}.json"
    path.write_text(json.dumps({
        "stamp": stamp, "argv": sys.argv[1:], "points": points, "failed": failed,
        "load_average": [load_start, load_end], "duration_s": round(time.monotonic() - started, 1),
        "table": table,
    }, indent=1, default=str))  # fmt: skip
    print(f"wrote {path}")
    return 1 if failed else 0


def _line(point: dict[str, Any]) -> str:
    f = point["figures"]
    return (f"{point['pods']:>3} pods: DB CPU {f['db_cpu_pct']:.2f}% of a core (server "
            f"{f['server_cpu_pct']:.2f}%, bench backends {f['bench_backends_cpu_pct']:.2f}%), "
            f"{f.get('transactions_per_s', 0):.1f} tx/s, {f.get('rows_read_per_s', 0):,.0f} rows "
            f"read/s, pods {f['pods_cpu_pct_per_pod']:.2f}%/pod; ready in {point['ready_seconds']}s, "
            f"{point['bench_connections']} connections")  # fmt: skip


def render(points: Sequence[dict[str, Any]], args: argparse.Namespace) -> str:
    header = ["database", "config", "history", "pods", "DB CPU % of a core (minus no-pod)",
              "bench backends CPU %", "no-pod server CPU % before / after", "tx/s", "rows read/s",
              "pod CPU %/pod", "connections"]  # fmt: skip
    rows = []
    for p in points:
        f, b = p["figures"], p["baseline"]
        pods = str(p["pods"]) if p["pods"] == p["pods_wanted"] else f"{p['pods']} (of {p['pods_wanted']})"
        rows.append([p["database"], p["config"], f"{p['history']:,}", pods,
                     f"{f['db_cpu_pct']:.2f}",
                     f"{f['bench_backends_cpu_pct']:.2f}" if p["database"] == "postgresql" else "-",
                     f"{b['server_cpu_pct']:.2f} / " + (f"{p['baseline_after']['server_cpu_pct']:.2f}"
                                                       if "baseline_after" in p else "-"),
                     f"{f.get('transactions_per_s', 0):.1f}",
                     f"{f.get('rows_read_per_s', 0):,.0f}", f"{f['pods_cpu_pct_per_pod']:.2f}",
                     str(p["bench_connections"])])  # fmt: skip
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]  # fmt: skip
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    note = (f"window {args.window:.0f}s x {args.windows} (median), settle {args.settle:.0f}s after "
            "the last pod's /readyz; DB CPU = server processes' utime+stime minus the mean of no-pod "
            "windows over the same data before and after the pods; tx/s: pg_stat_database xact_commit+rollback of `bench` "
            "(MariaDB: global Questions); rows read/s: tup_returned+tup_fetched (MariaDB: "
            "global Handler_read_*)")  # fmt: skip
    return "\n".join(["Idle fleet: `dbworker run` pods with an unordered and an ordered eligible "
                      "worker, no work", note, "", *lines])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
