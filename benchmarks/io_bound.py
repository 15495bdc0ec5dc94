"""I/O-bound work side by side (issue 28): each item's handler awaits a 100 ms response from a
local HTTP server, then writes one row to PostgreSQL. dbworker's `async def` handler against
procrastinate's and PgQueuer's async workers and Celery's I/O pools (gevent, threads), every
pod with the same handler processes and the same items in flight, in one run.

    .venv/bin/python -m benchmarks.io_bound --items 2000 --concurrency 200 --processes 2

Per system it prints items/s of a drain, pick-up p50/p99 (idle probes), the most database
sessions and the most RSS of the pod, and worker CPU per item. A pod is what a container
would run: dbworker's is one `sys_dbworker serve --worker io` (a coordinator and
`--processes` handler processes carrying `--concurrency` items); a peer's is `--processes`
copies of its worker command (each with concurrency / processes jobs in flight) under one
`sh`, which forwards SIGTERM. The adapters (sys_*.py), pod handling (procs.py) and the
drain, probe and connection counting (workloads.py) are the CPU benchmark's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import redis

from benchmarks import io_app, probe, procs, workloads
from benchmarks.workloads import Kind, System, Workload

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# A database and a Redis db of its own (not benchmarks.run's `bench` and db 15): the adapters
# wipe them. The peers' apps read them from BENCH_* at import, so they are set before that.
DB_NAME = "bench_io"
PG_DSN = f"postgresql://postgres@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/14"
# dbworker-poolN: each handler process keeps N connections (engine_options pool_size=N,
# max_overflow=0) instead of the default (up to 15); dbworker-sync: dbworker's sync handler,
# a process per item in flight (--sync-concurrency).
ALL_SYSTEMS = ("dbworker", "dbworker-pool3", "procrastinate", "pgqueuer", "celery-gevent", "celery-threads",
               "dbworker-sync")  # fmt: skip
DEFAULT_SYSTEMS = ALL_SYSTEMS[:6]
PGQUEUER_BATCH = 10  # PgQueuer's default batch size (its cap must be at least twice it)


def serve(port: int, delay: float) -> None:
    """The slow HTTP server: answers every GET /work/N after ``delay`` seconds."""
    import asyncio

    from aiohttp import web

    async def work(request: web.Request) -> web.Response:
        await asyncio.sleep(delay)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/work/{n}", work)
    web.run_app(app, host="127.0.0.1", port=port, print=None, backlog=4096)


def build(name: str, args: argparse.Namespace) -> tuple[System, Kind, int]:
    """The adapter, the kind of items and the worker commands per pod of system ``name``."""
    from benchmarks.sys_celery import CelerySystem
    from benchmarks.sys_dbworker import DbworkerSystem
    from benchmarks.sys_pgqueuer import PgQueuerSystem
    from benchmarks.sys_procrastinate import ProcrastinateSystem

    per_process = args.concurrency // args.processes
    if name == "dbworker" or name.startswith("dbworker-pool"):
        pool = int(name.removeprefix("dbworker-pool")) if name != "dbworker" else None
        return DbworkerSystem(url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB_NAME}", database="postgresql",
                              concurrency=args.concurrency, processes=args.processes, cwd=ROOT,
                              async_pool=pool), "io", 1  # fmt: skip
    if name == "dbworker-sync":
        return DbworkerSystem(url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB_NAME}", database="postgresql",
                              concurrency=args.sync_concurrency, cwd=ROOT), "io_sync", 1  # fmt: skip
    if name == "procrastinate":
        return ProcrastinateSystem(pg_dsn=PG_DSN, concurrency=per_process), "io", args.processes
    if name == "pgqueuer":
        return PgQueuerSystem(pg_dsn=PG_DSN, concurrency=per_process, batch_size=PGQUEUER_BATCH), "io", args.processes
    pool = name.removeprefix("celery-")
    return CelerySystem(pg_dsn=PG_DSN, redis_url=probe.redis_url(), concurrency=per_process, pool=pool), "io", args.processes


def pod_argv(system: System, kind: Kind, copies: int) -> tuple[list[str], dict[str, str]]:
    """The pod's command: the adapter's own, or ``copies`` of it under one ``sh`` that passes
    SIGTERM on to them and waits (each copy with its own index, so Celery's names differ)."""
    argv, env = system.pod_command(kind, 0)
    if copies == 1:
        return argv, env
    starts = " ".join(f"{shlex.join(system.pod_command(kind, i)[0])} & pids=\"$pids $!\";" for i in range(copies))
    script = f"pids=''; trap 'kill -TERM $pids 2>/dev/null; wait' TERM INT; {starts} wait"
    return ["sh", "-c", script], env


def tree_rss(pod: procs.Pod) -> int:
    total = 0
    for proc in pod.tree():
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_system(name: str, args: argparse.Namespace, counter: workloads.ConnectionCounter,
               redis_client: redis.Redis, log_dir: Path, rng: random.Random) -> dict[str, Any]:  # fmt: skip
    """Reset, start one pod, warm it up, time a drain, then idle pick-up probes; stop the pod."""
    system, kind, copies = build(name, args)
    drain = Workload(name="io_drain", kind=kind, items=args.items)
    probes = Workload(name="io_pickup", kind=kind, items=args.probes, gap=(0.05, 0.2))
    result = workloads.RunResult(system=name, database="postgresql", workload="io", repeat=0, items=args.items,
                                 pods=1, history=0, load_1m=round(os.getloadavg()[0], 2))  # fmt: skip
    warm = range(1, 1 + args.concurrency)  # every in-flight slot runs once: pools and clients open
    measured = range(warm.stop, warm.stop + args.items)
    probed = range(measured.stop, measured.stop + args.probes)
    out: dict[str, Any] = {"in_flight": args.concurrency if kind == "io" else args.sync_concurrency,
                           "processes": args.processes if kind == "io" else args.sync_concurrency}  # fmt: skip
    pod: procs.Pod | None = None
    try:
        workloads.reset_system(system, 0)
        redis_client.delete(probe.LATENCY_KEY)
        argv, env = pod_argv(system, kind, copies)
        env = {**env, io_app.PROBES_VARIABLE: str(probed.start)}
        pod = procs.start_pod(argv, env=env, log_path=log_dir / f"{name}.log", cwd=ROOT)
        procs.wait_alive([pod], 0.5)
        system.enqueue(list(warm), kind)
        workloads.wait_done(system, kind, warm, [pod], timeout=180)
        out["rss_idle_mb"] = tree_rss(pod) / 2**20
        conns: list[int] = []
        rss: list[int] = []

        def sample() -> None:
            count = counter.count("postgresql", pod)
            if count is not None:
                conns.append(count)
            rss.append(tree_rss(pod))

        sample()
        cpu_before = procs.tree_cpu_seconds(pod)
        done = workloads.measure_drain(system, drain, measured, [pod], result, sample, args.budget)
        result.cpu_ms_per_item = (procs.tree_cpu_seconds(pod) - cpu_before) * 1000.0 / done
        sample()
        workloads.measure_latency(system, probes, probed, [pod], redis_client, rng, result, sample)
        result.db_conns_per_pod = float(max(conns)) if conns else None
        out["peak_rss_mb"] = max(rss) / 2**20
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if pod is not None:
            procs.stop_pod(pod)
        system.close()
    return {**result.as_dict(), **out}


def table(runs: list[dict[str, Any]]) -> str:
    """Medians over repeats per system, and issue 28's target against the best peer."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if not r["error"]:
            by.setdefault(r["system"], []).append(r)

    def med(name: str, key: str) -> float | None:
        values = [r[key] for r in by.get(name, []) if r.get(key) is not None]
        return statistics.median(values) if values else None

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    lines = ["| system | processes x in flight | items/s | pick-up p50 ms | pick-up p99 ms | peak DB conns/pod "
             "| RSS idle / peak MB/pod | worker CPU ms/item | runs |", "|---" * 9 + "|"]  # fmt: skip
    for name, rs in by.items():
        per = f"{rs[0]['processes']} x {rs[0]['in_flight'] // rs[0]['processes']}"
        lines.append(f"| {name} | {per} | {fmt(med(name, 'items_per_s'), ',.0f')} | "
                     f"{fmt(med(name, 'latency_p50_ms'), '.1f')} | {fmt(med(name, 'latency_p99_ms'), '.1f')} | "
                     f"{fmt(med(name, 'db_conns_per_pod'), '.0f')} | {fmt(med(name, 'rss_idle_mb'), '.0f')} / "
                     f"{fmt(med(name, 'peak_rss_mb'), '.0f')} | {fmt(med(name, 'cpu_ms_per_item'), '.2f')} | "
                     f"{len(rs)} |")  # fmt: skip
    peers = [n for n in by if not n.startswith("dbworker") and med(n, "items_per_s")]
    if peers:
        best = max(peers, key=lambda n: med(n, "items_per_s") or 0.0)
        rate, conns = med(best, "items_per_s") or 1.0, med(best, "db_conns_per_pod")
        lines.append(f"\nIssue 28's target against the best peer ({best}: {rate:,.0f} items/s, {fmt(conns, '.0f')} "
                     "connections): >= 1.2x its items/s with no more connections")  # fmt: skip
        for ours in (n for n in by if n.startswith("dbworker") and n != "dbworker-sync"):
            mine, my_conns = med(ours, "items_per_s") or 0.0, med(ours, "db_conns_per_pod")
            fewer = my_conns is not None and conns is not None and my_conns <= conns
            lines.append(f"  {ours}: {mine / rate:.2f}x ({'met' if mine >= 1.2 * rate else 'NOT met'}), "
                         f"{fmt(my_conns, '.0f')} connections ({'met' if fewer else 'NOT met'})")  # fmt: skip
    failed = [f"{r['system']}: {r['error']}" for r in runs if r["error"]]
    return "\n".join(lines + (["\nFailed runs:", *failed] if failed else []))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ensure_database() -> None:
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=2000, help="items of the timed drain")
    p.add_argument("--concurrency", type=int, default=200, help="items in flight per pod, every system")
    p.add_argument("--processes", type=int, default=2, help="handler processes per pod, every system")
    p.add_argument("--sync-concurrency", type=int, default=16, help="dbworker-sync's processes (one item each)")
    p.add_argument("--probes", type=int, default=40, help="pick-up probes, one item at a time, 50-200 ms apart")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"a subset of {','.join(ALL_SYSTEMS)}")
    p.add_argument("--repeats", type=int, default=1, help="runs of every system, in a rotating order")
    p.add_argument("--delay", type=float, default=0.1, help="seconds the HTTP server takes to answer")
    p.add_argument("--budget", type=float, default=120.0, help="seconds a drain may take")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.delay)
        return 0
    systems = [s for s in args.systems.split(",") if s]
    if unknown := {s for s in systems if not s.startswith("dbworker-pool")} - set(ALL_SYSTEMS):
        p.error(f"unknown systems {sorted(unknown)}")
    os.environ.update({"BENCH_PG_DSN": PG_DSN, "BENCH_REDIS_URL": REDIS_URL})
    _ensure_database()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = RESULTS / "logs" / f"io-{stamp}"
    port = _free_port()
    os.environ[io_app.URL_VARIABLE] = f"http://127.0.0.1:{port}"  # every pod inherits it
    server = subprocess.Popen([sys.executable, "-m", "benchmarks.io_bound", "--serve", str(port),
                               "--delay", str(args.delay)], start_new_session=True)  # fmt: skip
    counter = workloads.ConnectionCounter(PG_DSN)
    redis_client = redis.Redis.from_url(probe.redis_url())
    rng = random.Random(28)
    runs: list[dict[str, Any]] = []
    try:
        time.sleep(2)
        for repeat in range(args.repeats):
            order = systems[repeat % len(systems):] + systems[:repeat % len(systems)]
            for name in order:
                run = run_system(name, args, counter, redis_client, log_dir, rng)
                run["repeat"] = repeat
                print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {name}: {run['items_per_s'] or 0:,.0f} items/s, "
                      f"load {run['load_1m']}{', ' + run['error'] if run['error'] else ''}", flush=True)  # fmt: skip
                runs.append(run)
    finally:
        server.terminate()
        server.wait(10)
        counter.close()
    text = (f"N={args.items} items, {args.processes} handler processes x {args.concurrency // args.processes} "
            f"in flight per pod, {args.delay * 1000:.0f} ms HTTP wait, {args.probes} pick-up probes, "
            f"{args.repeats} repeat(s), load {os.getloadavg()[0]:.1f}\n\n{table(runs)}")  # fmt: skip
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"io-{stamp}.json").write_text(json.dumps({"args": vars(args), "runs": runs, "table": text}, indent=1))
    return 1 if any(r["error"] for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
