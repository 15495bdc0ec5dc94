"""`python -m benchmarks.claim_history`: a dbworker claim's cost with and without history.

For 0 and --history FINISHED items already recorded in the work table, it drains --items
new items with an in-process Coordinator (concurrency 2, library defaults) and prints the
median milliseconds per claim round trip (from the observer's `claimed` events) and the
drain rate. PostgreSQL by default; `--sqlite` and `--mariadb` add those databases.
`--worker again` drains items whose handler returns Unfinished at its first call and
Finished at its second. `--idle-seconds S` then leaves the coordinator idle for S seconds
over that history and prints PostgreSQL's CPU meanwhile (every postgres process of this
host: run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

from benchmarks import probe
from benchmarks.run import DEFAULT_MARIADB_URL, DEFAULT_SQLITE_PATH, ROOT, ensure_databases
from benchmarks.sys_dbworker import DbworkerSystem
from benchmarks.workloads import Database
from dbworker.observe import Observer


@dataclass
class ClaimRecorder(Observer):
    """Keeps every claim round trip that took items, and when executions ended."""

    claims: list[tuple[int, float]] = field(default_factory=list)  # (count, seconds)
    first_claim_at: float | None = None
    last_done_at: float | None = None
    done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claimed(self, worker: str, *, count: int, taken_over: int, seconds: float) -> None:
        if count == 0:
            return
        with self.lock:
            self.claims.append((count, seconds))
            if self.first_claim_at is None:
                self.first_claim_at = time.perf_counter() - seconds

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        with self.lock:
            self.done += 1
            self.last_done_at = time.perf_counter()


@dataclass(frozen=True)
class Figures:
    database: str
    history: int
    claims: int
    ms_per_claim: float
    ms_per_claim_p90: float
    items_per_s: float
    idle_cpu_pct: float | None  # PostgreSQL's CPU while the coordinator idled, % of one core


def _postgres_cpu_seconds() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("postgres"):
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
    return total


def measure(system: DbworkerSystem, url: str, *, history: int, items: int, concurrency: int,
            worker: str = "noop", idle_seconds: float = 0.0) -> Figures:  # fmt: skip
    """Drain ``items`` new items over ``history`` finished ones; claim cost and drain rate."""
    from benchmarks import dbworker_app

    system.reset(history=history, worker=worker)
    new = range(history + 1, history + 1 + items)
    system.enqueue(list(new), "noop")
    coordinator = dbworker_app.build_coordinator(url, concurrency=concurrency)
    recorder = ClaimRecorder()
    coordinator.add_observer(recorder)
    coordinator.start(workers=[worker])
    idle_cpu_pct = None
    try:
        deadline = time.monotonic() + max(300.0, items / 2.0)
        while system.outstanding(worker, new) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{system.name}: {system.outstanding(worker, new)} of {items} items still "
                    "outstanding at the deadline"
                )
            time.sleep(0.05)
        if idle_seconds > 0 and system.database == "postgresql":
            before, start = _postgres_cpu_seconds(), time.monotonic()
            time.sleep(idle_seconds)
            idle_cpu_pct = 100.0 * (_postgres_cpu_seconds() - before) / (time.monotonic() - start)
    finally:
        coordinator.stop(timeout=10)
    seconds = [s for _, s in recorder.claims]
    if not seconds or recorder.first_claim_at is None or recorder.last_done_at is None:
        raise RuntimeError(f"{system.name}: no claim was observed")
    ordered = sorted(seconds)
    return Figures(
        database=system.database,
        history=history,
        claims=len(seconds),
        ms_per_claim=statistics.median(seconds) * 1000.0,
        ms_per_claim_p90=ordered[int(0.9 * (len(ordered) - 1))] * 1000.0,
        items_per_s=items / (recorder.last_done_at - recorder.first_claim_at),
        idle_cpu_pct=idle_cpu_pct,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_history", description=__doc__)
    parser.add_argument("--items", type=int, default=1000, help="new items drained per case")
    parser.add_argument("--history", type=int, default=100_000,
                        help="FINISHED items recorded before the drain")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--worker", choices=["noop", "again"], default="noop",
                        help="again: Unfinished at the first call, Finished at the second")  # fmt: skip
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="then idle this long and report PostgreSQL's CPU")  # fmt: skip
    parser.add_argument("--sqlite", action="store_true", help="also SQLite (a file)")
    parser.add_argument("--mariadb", action="store_true", help="also MariaDB")
    parser.add_argument("--no-postgresql", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--pg-dsn", default=probe.DEFAULT_PG_DSN)
    parser.add_argument("--mariadb-url", default=DEFAULT_MARIADB_URL)
    parser.add_argument("--sqlite-path", default=DEFAULT_SQLITE_PATH)
    args = parser.parse_args(argv)
    if args.items < 1 or args.history < 0 or args.concurrency < 1 or args.idle_seconds < 0:
        parser.error("--items and --concurrency must be at least 1, --history and --idle-seconds at least 0")

    from sqlalchemy.engine import make_url

    targets: list[tuple[Database, str]] = []
    if not args.no_postgresql:
        pg = make_url(args.pg_dsn).set(drivername="postgresql+psycopg")
        targets.append(("postgresql", pg.render_as_string(hide_password=False)))
    if args.sqlite:
        targets.append(("sqlite", f"sqlite:///{args.sqlite_path}"))
    if args.mariadb:
        targets.append(("mariadb", args.mariadb_url))
    if not targets:
        parser.error("nothing to measure: drop --no-postgresql or add --sqlite/--mariadb")
    ensure_databases(
        argparse.Namespace(pg_dsn=args.pg_dsn, mariadb_url=args.mariadb_url,
                           systems="dbworker" if args.mariadb else "",
                           dbworker_databases="mariadb" if args.mariadb else "")
    )  # fmt: skip

    print(f"dbworker claim cost, {args.items} items drained by worker {args.worker}, "
          f"concurrency {args.concurrency} (shared machine: figures are noisy)")  # fmt: skip
    print(f"{'database':<11} {'history':>8} {'claims':>7} {'ms/claim p50':>13} "
          f"{'p90':>8} {'drain items/s':>14} {'vs 0':>6} {'idle PG CPU':>12}")  # fmt: skip
    failed = False
    for database, url in targets:
        system = DbworkerSystem(url=url, database=database, concurrency=args.concurrency, cwd=ROOT)
        base: Figures | None = None
        try:
            for history in (0, args.history):
                try:
                    fig = measure(system, url, history=history, items=args.items,
                                  concurrency=args.concurrency, worker=args.worker,
                                  idle_seconds=args.idle_seconds)  # fmt: skip
                except Exception as exc:
                    failed = True
                    print(f"{database:<11} {history:>8,} FAILED: {exc}")
                    continue
                base = base or (fig if history == 0 else None)
                ratio = f"{fig.items_per_s / base.items_per_s:.2f}x" if base else "-"
                idle = "-" if fig.idle_cpu_pct is None else f"{fig.idle_cpu_pct:.2f}%"
                print(f"{database:<11} {history:>8,} {fig.claims:>7} {fig.ms_per_claim:>13.2f} "
                      f"{fig.ms_per_claim_p90:>8.2f} {fig.items_per_s:>14.1f} {ratio:>6} {idle:>12}",
                      flush=True)  # fmt: skip
        finally:
            system.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
