"""I/O-bound work (issue 28): each item's handler awaits a 100 ms response from a local HTTP
server, then writes one row. dbworker's async handler (2 handler processes per pod) against
its sync handler (a process per item), on PostgreSQL.

    .venv/bin/python -m benchmarks.io_bound --items 4000 --concurrency 200 --processes 2

Prints items/s, the wait from insert to handler start (p50/p99, queueing in a drain
included), the most connections to the benchmark database and the most memory (RSS) of the
pod's process tree. The peers (procrastinate, PgQueuer, Celery) are not in this script.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psutil
import sqlalchemy as sa

DB_NAME = "bench_io"
SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432"


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


def pod(url: str, mode: str, concurrency: int, processes: int) -> None:
    """One worker pod: a coordinator running the benchmark's worker until SIGTERM."""
    from sqlalchemy.orm import sessionmaker

    from benchmarks import io_app
    from dbworker import Coordinator

    engine = sa.create_engine(url)
    c = Coordinator(sessionmaker(engine), database_url=url, poll_seconds=0.05, max_poll_seconds=0.5)
    if mode == "async":
        c.transactional_worker(name="io", source=io_app.IoItem, concurrency=concurrency,
                               processes=processes)(io_app.handle_async)  # fmt: skip
    else:
        c.transactional_worker(name="io", source=io_app.IoItem, concurrency=concurrency)(io_app.handle_sync)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    c.start()
    stop.wait()
    c.stop(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _reset(url: str) -> None:
    admin = sa.create_engine(f"{SERVER_URL}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{DB_NAME}"')
    admin.dispose()
    from sqlalchemy.orm import sessionmaker

    from benchmarks import io_app
    from dbworker import Coordinator

    io_app.Base.metadata.create_all(sa.create_engine(url))
    c = Coordinator(sessionmaker(sa.create_engine(url)), database_url=url)
    c.transactional_worker(name="io", source=io_app.IoItem)(io_app.handle_sync)
    c.create_worker_tables()


def _tree_rss(pid: int) -> int:
    try:
        proc = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
    except psutil.Error:
        return 0


def run_once(args: argparse.Namespace, mode: str, concurrency: int, processes: int, http_url: str) -> dict[str, Any]:
    url = f"{SERVER_URL}/{DB_NAME}"
    _reset(url)
    env = {**os.environ, "DBWORKER_BENCH_IO_URL": http_url}
    worker = subprocess.Popen([sys.executable, "-m", "benchmarks.io_bound", "--pod", mode, "--url", url,
                               "--concurrency", str(concurrency), "--processes", str(processes)],
                              env=env, start_new_session=True)  # fmt: skip
    engine = sa.create_engine(url)
    try:
        time.sleep(args.warm_up)  # handler processes started and connected
        rss_idle = _tree_rss(worker.pid)
        with engine.begin() as conn:
            now = time.time()
            conn.execute(sa.text("INSERT INTO io_item (id, created) SELECT g, :now FROM generate_series(1, :n) g"),
                         {"now": now, "n": args.items})  # fmt: skip
        begun = time.monotonic()
        peak_conns = peak_rss = 0
        done = 0
        while done < args.items and time.monotonic() - begun < args.budget:
            with engine.connect() as conn:
                done = int(conn.execute(sa.text("SELECT count(*) FROM io_out")).scalar_one())
                conns = int(conn.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")).scalar_one()) - 1
            peak_conns, peak_rss = max(peak_conns, conns), max(peak_rss, _tree_rss(worker.pid))
            time.sleep(0.1)
        elapsed = time.monotonic() - begun
        with engine.connect() as conn:
            waits = sorted(s - c for s, c in conn.execute(sa.text(
                "SELECT o.started, i.created FROM io_out o JOIN io_item i ON i.id = o.item_id")).all())  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        engine.dispose()
    return {
        "mode": mode, "concurrency": concurrency, "processes": processes, "done": len(waits),
        "items_per_s": len(waits) / elapsed if elapsed else 0.0,
        "wait_p50_ms": 1000 * statistics.median(waits) if waits else None,
        "wait_p99_ms": 1000 * waits[int(0.99 * (len(waits) - 1))] if waits else None,
        "peak_connections": peak_conns, "rss_idle_mb": rss_idle / 2**20, "peak_rss_mb": peak_rss / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=200, help="items at once of the async worker")
    p.add_argument("--processes", type=int, default=2, help="handler processes of the async worker")
    p.add_argument("--sync-concurrency", type=int, default=16, help="handler processes of the sync worker (0: skip)")
    p.add_argument("--delay", type=float, default=0.1, help="seconds the HTTP server takes to answer")
    p.add_argument("--warm-up", type=float, default=4.0)
    p.add_argument("--budget", type=float, default=300.0, help="seconds a drain may take")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    p.add_argument("--pod", choices=("async", "sync"), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.delay)
        return 0
    if args.pod:
        pod(args.url, args.pod, args.concurrency, args.processes)
        return 0
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "benchmarks.io_bound", "--serve", str(port),
                               "--delay", str(args.delay)], start_new_session=True)  # fmt: skip
    try:
        time.sleep(2)
        http_url = f"http://127.0.0.1:{port}"
        runs = [run_once(args, "async", args.concurrency, args.processes, http_url)]
        if args.sync_concurrency:
            runs.append(run_once(args, "sync", args.sync_concurrency, args.sync_concurrency, http_url))
    finally:
        server.terminate()
        server.wait(10)
    print(f"{'handler':8} {'items at once':>13} {'processes':>9} {'done':>6} {'items/s':>8} {'wait p50 ms':>11} "
          f"{'wait p99 ms':>11} {'peak conns':>10} {'RSS idle MB':>11} {'peak RSS MB':>11}")  # fmt: skip
    for r in runs:
        print(f"{r['mode']:8} {r['concurrency']:>13} {r['processes']:>9} {r['done']:>6} {r['items_per_s']:>8.1f} "
              f"{r['wait_p50_ms'] or 0:>11.0f} {r['wait_p99_ms'] or 0:>11.0f} {r['peak_connections']:>10} "
              f"{r['rss_idle_mb']:>11.0f} {r['peak_rss_mb']:>11.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
