"""`python -m benchmarks.run`: every system, every workload, interleaved repeats, one report.

Creates the `bench` databases if missing, builds the adapters, runs each workload on each
system in a rotating order per repeat (so no system always runs first or last), prints the
table of medians with min-max and ratios, and writes JSON and a PNG under
benchmarks/results/. Every worker process it starts is stopped before it exits, even on error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any, cast

import psycopg
import pymysql
import redis
from sqlalchemy.engine import make_url

from benchmarks import probe, report, workloads
from benchmarks.workloads import Database, System, Workload

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ALL_SYSTEMS = ("dbworker", "celery", "procrastinate", "pgqueuer")
ALL_DBWORKER_DATABASES = ("postgresql", "sqlite", "mariadb")
ALL_WORKLOADS = ("drain_noop", "drain_write", "latency", "drain_history", "fanout",
                 "latency_enable", "latency_dependent")  # fmt: skip
DEFAULT_WORKLOADS = ALL_WORKLOADS[:5]
LATENCY_WORKLOADS = "latency,latency_enable,latency_dependent"
ALL_DBWORKER_CONFIGS = ("default", "no-triggers", "trigger", "no-history")
DEFAULT_MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/bench"
DEFAULT_SQLITE_PATH = "/tmp/dbworker-bench/bench.sqlite"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="dbworker vs Celery+Redis, procrastinate and PgQueuer, side by side.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="N=500, 20 latency probes, 2 repeats: a few minutes (default: full)")
    parser.add_argument("--items", type=int, help="items per drain (full 5000, quick 500)")
    parser.add_argument("--latency-items", type=int,
                        help="items of the latency probe (full 150, quick 20)")
    parser.add_argument("--history", type=int, default=100_000,
                        help="finished items already recorded in the history workload")
    parser.add_argument("--repeats", type=int, help="repeats of everything (full 3, quick 2)")
    parser.add_argument("--budget", type=float,
                        help="seconds a drain may take before it ends and reports the rate of "
                             "what it completed (full 300, quick 30)")
    parser.add_argument("--dbworker-configs", default="default,no-triggers,trigger",
                        help="dbworker configurations on PostgreSQL: default (plain "
                             "upgrade_worker_tables()), no-triggers (its opt-out), trigger "
                             "(plus install_notify_triggers()), no-history (history_attempts=0)")
    parser.add_argument("--dbworker-configs-elsewhere", default="default",
                        help="dbworker configurations on SQLite and MariaDB")
    parser.add_argument("--no-notify-trigger", action="store_true",
                        help="shorthand for --dbworker-configs no-triggers")
    parser.add_argument("--case-items", type=int,
                        help="probes of latency_enable and latency_dependent (full 40, quick 10)")
    parser.add_argument("--concurrency", type=int, default=2, help="handlers per pod")
    parser.add_argument("--fanout-pods", type=int, default=4, help="pods in the fan-out workload")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                        help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}")
    parser.add_argument("--dbworker-databases", default=",".join(ALL_DBWORKER_DATABASES),
                        help="databases for dbworker (peers run on PostgreSQL only)")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated subset of {','.join(ALL_WORKLOADS)}; 'latency-all' "
                             f"means {LATENCY_WORKLOADS} (default: {','.join(DEFAULT_WORKLOADS)})")
    parser.add_argument("--pg-dsn", default=probe.DEFAULT_PG_DSN)
    parser.add_argument("--redis-url", default=probe.DEFAULT_REDIS_URL)
    parser.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    parser.add_argument("--sqlite-path", default=DEFAULT_SQLITE_PATH)
    parser.add_argument("--seed", type=int, default=7, help="seed of the latency probe's gaps")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where JSON, PNG and logs go")
    args = parser.parse_args(argv)  # fmt: skip
    full = not args.quick
    if args.items is None:
        args.items = 5000 if full else 500
    if args.latency_items is None:
        args.latency_items = 150 if full else 20
    if args.repeats is None:
        args.repeats = 3 if full else 2
    if args.budget is None:
        args.budget = 300.0 if full else 30.0
    if args.case_items is None:
        args.case_items = 40 if full else 10
    if args.no_notify_trigger:
        args.dbworker_configs = "no-triggers"
    args.workloads = args.workloads.replace("latency-all", LATENCY_WORKLOADS)
    for flag, value, known in (
        ("--systems", args.systems, ALL_SYSTEMS),
        ("--dbworker-databases", args.dbworker_databases, ALL_DBWORKER_DATABASES),
        ("--workloads", args.workloads, ALL_WORKLOADS),
        ("--dbworker-configs", args.dbworker_configs, ALL_DBWORKER_CONFIGS),
        ("--dbworker-configs-elsewhere", args.dbworker_configs_elsewhere, ALL_DBWORKER_CONFIGS),
    ):
        unknown = [v for v in value.split(",") if v and v not in known]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    for flag, number in (("--items", args.items), ("--latency-items", args.latency_items),
                         ("--repeats", args.repeats), ("--concurrency", args.concurrency),
                         ("--fanout-pods", args.fanout_pods),
                         ("--case-items", args.case_items)):  # fmt: skip
        if number < 1:
            parser.error(f"{flag} must be at least 1, got {number}")
    if args.budget <= 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget}")
    if args.history < 0:
        parser.error(f"--history must be 0 or more, got {args.history}")
    return args


def build_workloads(args: argparse.Namespace) -> list[Workload]:
    chosen = set(args.workloads.split(","))
    every = [
        Workload("drain_noop", "noop", args.items, title="drain N no-op"),
        Workload("drain_write", "write", args.items, title="drain N, one write each"),
        Workload("latency", "latency", args.latency_items, gap=(0.1, 0.4),
                 title="insert -> handler start, ~4 items/s, idle workers"),
        Workload("drain_history", "noop", args.items, history=args.history,
                 title=f"drain N no-op, {args.history:,} finished items recorded"),
        Workload("fanout", "noop", args.items * 2, pods=args.fanout_pods,
                 title=f"drain 2N no-op, {args.fanout_pods} pods on one database"),
        Workload("latency_enable", "enable", args.case_items, gap=(0.1, 0.4),
                 title="UPDATE enabling a row behind the sweep's cursor -> handler start"),
        Workload("latency_dependent", "dependent", args.case_items, gap=(0.1, 0.4),
                 title="dependency's handler end -> dependent's handler start"),
    ]  # fmt: skip
    return [w for w in every if w.name in chosen]


def build_systems(args: argparse.Namespace) -> list[System]:
    names = args.systems.split(",")
    systems: list[System] = []
    if "dbworker" in names:
        from benchmarks.sys_dbworker import DbworkerSystem

        urls = {
            "postgresql": make_url(args.pg_dsn).set(drivername="postgresql+psycopg")
            .render_as_string(hide_password=False),
            "sqlite": f"sqlite:///{args.sqlite_path}",
            "mariadb": args.mariadb_url,
        }
        for database in args.dbworker_databases.split(","):
            configs = (args.dbworker_configs if database == "postgresql"
                       else args.dbworker_configs_elsewhere)  # fmt: skip
            for config in configs.split(","):
                systems.append(
                    DbworkerSystem(url=urls[database], database=cast(Database, database),
                                   concurrency=args.concurrency, cwd=ROOT, config=config)
                )  # fmt: skip
    if "celery" in names:
        from benchmarks.sys_celery import CelerySystem

        systems.append(CelerySystem(pg_dsn=args.pg_dsn, redis_url=args.redis_url,
                                    concurrency=args.concurrency))  # fmt: skip
    if "procrastinate" in names:
        from benchmarks.sys_procrastinate import ProcrastinateSystem

        systems.append(ProcrastinateSystem(pg_dsn=args.pg_dsn, concurrency=args.concurrency))
    if "pgqueuer" in names:
        from benchmarks.sys_pgqueuer import PgQueuerSystem

        systems.append(PgQueuerSystem(pg_dsn=args.pg_dsn, concurrency=args.concurrency))
    return systems


def ensure_databases(args: argparse.Namespace) -> None:
    """Create the dedicated `bench` databases (never touching any other database)."""
    pg = make_url(args.pg_dsn)
    admin = pg.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (pg.database,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{pg.database}"')
    if "dbworker" in args.systems and "mariadb" in args.dbworker_databases:
        my = make_url(args.mariadb_url)
        conn2 = pymysql.connect(host=my.host, port=my.port or 3306, user=my.username,
                                password=my.password or "")  # fmt: skip
        try:
            with conn2.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{my.database}`")
        finally:
            conn2.close()


def mariadb_counter(url: str) -> Any:
    """Counts a pod's MariaDB sessions from the processlist, by client port."""
    my = make_url(url)

    def count(ports: set[int]) -> int:
        conn = pymysql.connect(host=my.host, port=my.port or 3306, user=my.username,
                               password=my.password or "")  # fmt: skip
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT HOST FROM information_schema.PROCESSLIST")
                hosts = [str(row[0]) for row in cur.fetchall()]
        finally:
            conn.close()
        return sum(1 for h in hosts if ":" in h and int(h.rsplit(":", 1)[1]) in ports)

    return count


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    """Where the figures came from; they mean little without it."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        import psutil

        mem_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }
    try:
        with psycopg.connect(args.pg_dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            info["postgresql"] = row[0] if row else None
    except psycopg.Error:
        info["postgresql"] = None
    try:
        info["redis"] = redis.Redis.from_url(args.redis_url).info("server").get("redis_version")
    except redis.RedisError:
        info["redis"] = None
    packages = ("dbworker", "SQLAlchemy", "psycopg", "celery", "kombu", "redis",
                "procrastinate", "pgqueuer", "asyncpg", "PyMySQL")  # fmt: skip
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info["packages"] = versions
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=False,
        ).stdout.strip()  # fmt: skip
    except OSError:
        info["git_commit"] = None
    return info


def library_fingerprint() -> str:
    """A short hash of dbworker's sources as its pods import them (the checkout may change)."""
    digest = hashlib.sha1()
    for path in sorted((ROOT / "dbworker").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def wakeup_keyword() -> bool | None:
    """Whether the checkout's upgrade_worker_tables() takes ``wakeup_triggers`` (issue 15)."""
    try:
        import inspect

        from dbworker import Coordinator
    except Exception:
        return None
    return "wakeup_triggers" in inspect.signature(Coordinator.upgrade_worker_tables).parameters


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Unwind through run_once's finally blocks, which stop every pod.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    ensure_databases(args)
    wls = build_workloads(args)
    systems = build_systems(args)
    names = [s.name for s in systems]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = args.out / "logs" / stamp
    counter = workloads.ConnectionCounter(args.pg_dsn, mariadb=mariadb_counter(args.mariadb_url))
    redis_client = redis.Redis.from_url(args.redis_url)
    rng = random.Random(args.seed)
    info = machine_info(args)
    config = {
        "quick": args.quick, "items": args.items, "latency_items": args.latency_items,
        "history": args.history, "repeats": args.repeats, "concurrency": args.concurrency,
        "fanout_pods": args.fanout_pods, "budget": args.budget, "systems": names,
        "dbworker_configs": args.dbworker_configs,
        "dbworker_configs_elsewhere": args.dbworker_configs_elsewhere,
        "case_items": args.case_items,
        "wakeup_triggers_keyword": wakeup_keyword(),
        "workloads": [vars(w) for w in wls],
    }  # fmt: skip
    print(f"benchmark {stamp}: {len(systems)} systems x {len(wls)} workloads x "
          f"{args.repeats} repeats; logs in {log_dir}", flush=True)  # fmt: skip
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for repeat in range(args.repeats):
            for w_index, workload in enumerate(wls):
                shift = (repeat + w_index) % len(systems)
                order = systems[shift:] + systems[:shift]
                for system in order:
                    if workload.history and not system.keeps_history:
                        continue  # nothing to pre-populate: same as drain_noop
                    if (workload.kind in workloads.DBWORKER_ONLY_KINDS
                            and not system.name.startswith("dbworker")):  # fmt: skip
                        continue
                    t0 = time.monotonic()
                    result = workloads.run_once(
                        system, workload, repeat=repeat, counter=counter,
                        redis_client=redis_client, log_dir=log_dir, cwd=ROOT, rng=rng,
                        budget=args.budget,
                    )  # fmt: skip
                    if result.error:
                        # Other engineers' tests restart PostgreSQL now and then: one more try.
                        print(_progress(result, time.monotonic() - t0) + "; retrying once",
                              flush=True)  # fmt: skip
                        time.sleep(5.0)
                        first_error = result.error
                        result = workloads.run_once(
                            system, workload, repeat=repeat, counter=counter,
                            redis_client=redis_client, log_dir=log_dir / "retry", cwd=ROOT,
                            rng=rng, budget=args.budget,
                        )  # fmt: skip
                        result.note = f"retried after: {first_error.splitlines()[0]}"
                    record = result.as_dict()
                    if system.name.startswith("dbworker"):
                        record["library"] = library_fingerprint()
                        record["migrate"] = getattr(system, "migrate_info", None)
                    runs.append(record)
                    print(_progress(result, time.monotonic() - t0), flush=True)
    except KeyboardInterrupt:
        print("interrupted: reporting the runs so far", file=sys.stderr)
    except Exception as exc:
        print(f"benchmark error ({type(exc).__name__}: {exc}): reporting the runs so far",
              file=sys.stderr)  # fmt: skip
    finally:
        for system in systems:
            system.close()
        counter.close()
    info["load_average_at_end"] = os.getloadavg()
    info["duration_s"] = round(time.monotonic() - started, 1)
    table = (
        f"N={args.items} items per drain (fan-out: {2 * args.items} over {args.fanout_pods} pods), "
        f"{args.latency_items} latency probes ({args.case_items} per enable/dependent case), "
        f"history {args.history:,}, concurrency "
        f"{args.concurrency} per pod, {args.repeats} repeats, drain budget {args.budget:.0f}s\n\n"
        + report.render(runs, names)
    )
    print()
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"bench-{stamp}.json"
    json_path.write_text(json.dumps(
        {"machine": info, "config": config, "runs": runs,
         "summary": report.summarize(runs, names), "table": table},
        indent=1, default=str,
    ))  # fmt: skip
    png_path = args.out / f"bench-{stamp}.png"
    report.write_chart(runs, names, png_path)
    (args.out / "latest.json").write_text(json_path.read_text())
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB; "
          f"PostgreSQL {info['postgresql']}, Redis {info['redis']}; load average "
          f"{info['load_average_at_start'][0]:.2f} at start, "
          f"{info['load_average_at_end'][0]:.2f} at end (shared machine: figures are noisy)")
    print(f"wrote {json_path} and {png_path} ({info['duration_s']} s)")  # fmt: skip
    return 1 if any(r.get("error") for r in runs) else 0


def _progress(result: workloads.RunResult, elapsed: float) -> str:
    head = f"[{result.repeat}] {result.workload:<13} {result.system:<17}"
    if result.error:
        return f"{head} FAILED: {result.error.splitlines()[0]}"
    if result.latency_p50_ms is not None:
        figure = f"p50 {result.latency_p50_ms:.1f} ms, p99 {result.latency_p99_ms:.1f} ms"
    else:
        figure = f"{result.items_per_s:,.0f} items/s"
    cpu = f"{result.cpu_ms_per_item:.2f}" if result.cpu_ms_per_item is not None else "-"
    partial = f" (partial: {result.note})" if result.partial else ""
    return f"{head} {figure}; CPU {cpu} ms/item; {elapsed:.0f} s{partial}"


if __name__ == "__main__":
    sys.exit(main())
