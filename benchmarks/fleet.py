"""`python -m benchmarks.fleet`: 1, 2, 4 and 8 `dbworker run` pods sharing one PostgreSQL,
directly and through PgBouncer in transaction mode.

For each route and pod count: the `bench_fleet` database is wiped and its tables created
(`dbworker migrate`, direct), N `dbworker run benchmarks.fleet_app:coordinator` processes
start (each its own process group and /readyz port, `--concurrency fleet=C`) and idle until
ready, then ITEMS source rows are inserted in one transaction and the benchmark waits until
every one is FINISHED. Over that drain it measures:

- items/s: ITEMS over the time from the insert's commit to the last item finished;
- server connections in use: the most PostgreSQL backends on `bench_fleet` seen (sampled
  every 50 ms; through PgBouncer these are its server connections plus the pods' direct
  LISTEN connections), and the same while the pods idled;
- PostgreSQL CPU per item: utime+stime of the postmaster and every backend (children it
  reaped during the drain included) over the drain, divided by ITEMS; the same for the
  PgBouncer process and for the pods' process trees.

Through PgBouncer the pods get DBWORKER_TRANSACTION_POOLER=true and DBWORKER_LISTEN_URL
(the direct server, for the one LISTEN connection per pod); PgBouncer (Debian's, started
here on a free port with a temporary config: transaction mode, trust auth, default_pool_size
POOL) forwards `bench_fleet` to the server. Every process started here is stopped at the
end, also on error or Ctrl-C. The server is shared with other engineers' tests: CPU figures
carry their noise (run twice, compare the medians of --repeat).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from benchmarks import procs
from benchmarks.idle_fleet import PgServer, cpu_by_pid, stop_pods, wait_ready

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.fleet_app:coordinator"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/bench_fleet"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bouncer:
    """PgBouncer in transaction mode on a free port, forwarding `bench_fleet` to the server."""

    def __init__(self, dsn: str, pool_size: int) -> None:
        server = make_url(dsn)
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="dbworker-fleet-pgbouncer-"))
        self.directory.chmod(0o755)  # PgBouncer refuses root: it runs as postgres and reads these
        users = self.directory / "users.txt"
        users.write_text(f'"{server.username or "postgres"}" ""\n')
        ini = self.directory / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"{server.database} = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
            f"max_client_conn = 5000\ndefault_pool_size = {pool_size}\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
        for f in (ini, users):
            f.chmod(0o644)
        command = [PGBOUNCER, str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", pwd.getpwnam("postgres").pw_name]
        self.log = self.directory / "pgbouncer.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"PgBouncer exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("PgBouncer did not accept connections in 30 s")
            time.sleep(0.1)
        self.url = make_url(dsn).set(drivername="postgresql+psycopg", host="127.0.0.1", port=self.port)

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)
        if self.process.poll() is None:
            self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("FLEET_DSN", DEFAULT_DSN))
    p.add_argument("--pods", default="1,2,4,8")
    p.add_argument("--routes", default="direct,pgbouncer")
    p.add_argument("--items", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=2, help="handler processes per pod")
    p.add_argument("--pool", type=int, default=10, help="PgBouncer default_pool_size")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--base-port", type=int, default=19300)
    p.add_argument("--json", type=Path, help="write the points here (e.g. benchmarks/results/fleet-<time>.json)")
    return p.parse_args(argv)


class Sampler(threading.Thread):
    """The most backends connected to the database, sampled every 50 ms until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.most = 0
        self.done = threading.Event()

    def count(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0

    def run(self) -> None:
        while not self.done.is_set():
            self.most = max(self.most, self.count())
            time.sleep(0.05)

    def stop(self) -> int:
        self.done.set()
        if self.is_alive():
            self.join(timeout=5)
        self.conn.close()
        return self.most


def _server_cpu(server: PgServer) -> float:
    cpu, reaped = cpu_by_pid(server)
    return sum(cpu.values()) + reaped


def migrate(url: str) -> None:
    from benchmarks import fleet_app

    engine = create_engine(url)
    try:
        fleet_app.Base.metadata.create_all(engine)
    finally:
        engine.dispose()
    done = subprocess.run([sys.executable, "-m", "dbworker", "migrate", APP], cwd=str(ROOT),
                          env={**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)},
                          capture_output=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"migrate failed: {done.stderr.decode()[-2000:]}")


def one_point(server: PgServer, args: argparse.Namespace, route: str, pods_n: int,
              bouncer: Bouncer | None, log_dir: Path) -> dict[str, Any]:
    server.wipe()
    migrate(server.url)
    env = {"DATABASE_URL": server.url, "PYTHONPATH": str(ROOT)}
    if bouncer is not None:
        env.update(DATABASE_URL=bouncer.url.render_as_string(hide_password=False),
                   DBWORKER_TRANSACTION_POOLER="true", DBWORKER_LISTEN_URL=server.url)
    pods = []
    try:
        for index in range(pods_n):
            argv = [sys.executable, "-m", "dbworker", "run", APP, "--metrics-port", str(args.base_port + index),
                    "--metrics-host", "127.0.0.1", "--concurrency", f"fleet={args.concurrency}"]
            pods.append(procs.start_pod(argv, env=env, log_path=log_dir / f"{route}-{pods_n}-pod{index}.log",
                                        cwd=ROOT))
        wait_ready(pods, args.base_port)
        time.sleep(2.0)  # let every handler process connect
        idle = Sampler(server.dsn)
        idle_connections = idle.count()
        idle.stop()
        sampler = Sampler(server.dsn)
        sampler.start()
        cpu0 = _server_cpu(server)
        pods0 = sum(procs.tree_cpu_seconds(p) for p in pods)
        bouncer0 = bouncer.cpu_seconds() if bouncer else 0.0
        with server.conn.transaction():
            server.conn.execute("INSERT INTO fleet_item (id) SELECT g FROM generate_series(1, %s) AS g",
                                (args.items,))
        t0 = time.monotonic()
        deadline = t0 + 600
        while True:
            row = server.conn.execute(
                "SELECT count(*) FROM fleet_work WHERE execution_status = 'finished'").fetchone()
            if row and int(row[0]) >= args.items:
                break
            for pod in pods:
                if not pod.alive():
                    raise RuntimeError(f"a pod exited; log {pod.log_path}:\n{pod.log_tail(10)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{route} x{pods_n}: not drained in 600 s")
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
        cpu = _server_cpu(server) - cpu0
        pods_cpu = sum(procs.tree_cpu_seconds(p) for p in pods) - pods0
        bouncer_cpu = (bouncer.cpu_seconds() - bouncer0) if bouncer else 0.0
        busy_connections = sampler.stop()
    finally:
        stop_pods(pods)
    return {"route": route, "pods": pods_n, "concurrency": args.concurrency, "items": args.items,
            "seconds": round(elapsed, 2), "items_per_s": round(args.items / elapsed, 1),
            "connections_idle": idle_connections, "connections_busy": busy_connections,
            "server_cpu_ms_per_item": round(1000 * cpu / args.items, 3),
            "pgbouncer_cpu_ms_per_item": round(1000 * bouncer_cpu / args.items, 3),
            "pods_cpu_ms_per_item": round(1000 * pods_cpu / args.items, 3)}


def _median(points: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(points[0])
    for key in ("seconds", "items_per_s", "server_cpu_ms_per_item", "pgbouncer_cpu_ms_per_item",
                "pods_cpu_ms_per_item"):
        out[key] = round(statistics.median(p[key] for p in points), 3)
    for key in ("connections_idle", "connections_busy"):
        out[key] = max(p[key] for p in points)
    return out


def render(points: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = ["| route | pods | items/s | server connections idle / draining | CPU ms per item: PostgreSQL "
             "| PgBouncer | pods |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in points:
        lines.append(f"| {p['route']} | {p['pods']} | {p['items_per_s']:.0f} | {p['connections_idle']} / "
                     f"{p['connections_busy']} | {p['server_cpu_ms_per_item']:.2f} | "
                     f"{p['pgbouncer_cpu_ms_per_item']:.2f} | {p['pods_cpu_ms_per_item']:.2f} |")
    lines.append("")
    for p in points:
        if p["pods"] != max(q["pods"] for q in points if q["route"] == p["route"]):
            continue
        if p["route"] == "direct":
            each = p["connections_busy"] / p["pods"]
            lines.append(f"- direct: {each:.1f} server connections per pod -> about {each * 100:.0f} for 100 pods")
        else:
            lines.append(f"- pgbouncer: at most default_pool_size ({args.pool}) pooled server connections plus "
                         f"one direct LISTEN connection per pod -> about {args.pool + 100} for 100 pods")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = PgServer(args.dsn)
    log_dir = Path(tempfile.mkdtemp(prefix="dbworker-fleet-"))
    points: list[dict[str, Any]] = []
    bouncer: Bouncer | None = None
    try:
        for route in args.routes.split(","):
            if route == "pgbouncer":
                bouncer = Bouncer(args.dsn, args.pool)
            for n in (int(x) for x in args.pods.split(",")):
                runs = [one_point(server, args, route, n, bouncer, log_dir) for _ in range(args.repeat)]
                point = _median(runs)
                points.append(point)
                print(json.dumps(point), flush=True)
            if bouncer is not None:
                bouncer.stop()
                bouncer = None
    finally:
        if bouncer is not None:
            bouncer.stop()
        server.close()
    info = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "server_max_connections": server.max_connections}
    print(json.dumps(info))
    print(render(points, args))
    if args.json:
        args.json.write_text(json.dumps({"info": info, "points": points}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
