"""The workloads and how one run of one workload on one system is measured.

A `System` adapter (sys_*.py) resets its storage, names its worker command, enqueues items
and says how many are still outstanding; this module starts the pods, warms them up, times
the drain or the latency probe, and samples CPU (psutil over each pod's process tree) and
database connections (pg_stat_activity / MariaDB's processlist, matched by client port).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import psutil
import psycopg
import redis

from benchmarks import probe, procs

# io, io_sync: the I/O-bound workload (io_bound.py); io_sync is dbworker's sync handler of it.
Kind = Literal["noop", "write", "latency", "enable", "dependent", "io", "io_sync"]
# Kinds only dbworker has (issue 15's pick-up cases); other systems skip their workloads.
DBWORKER_ONLY_KINDS = ("enable", "dependent")
# One probe of the enable / dependent workloads waits at most this long for its handler.
PROBE_TIMEOUT = 60.0
Database = Literal["postgresql", "sqlite", "mariadb"]

PG_PORT = 5432
REDIS_PORT = 6379
MARIADB_PORT = 3306
# Warm-up items per pod: every handler slot runs at least once (child processes spawned,
# connections opened) before anything is measured.
WARMUP_PER_POD = 6
# A drain in which nothing completes for this long has failed; do not wait out the timeout.
STALL_SECONDS = 45.0
RESET_ATTEMPTS = 5


class System(Protocol):
    """One system under test, as the benchmark drives it."""

    name: str  # key in results: "dbworker", "celery", "dbworker-sqlite", ...
    database: Database  # where its work lives (Celery: its results table, when it writes)
    keeps_history: bool  # False: finished items leave no trace (Celery without a backend)

    def reset(self, *, history: int) -> None:
        """Fresh storage with ``history`` finished items (ids 1..history) already recorded."""

    def pod_command(self, kind: Kind, index: int) -> tuple[list[str], dict[str, str]]:
        """argv and extra environment of worker pod ``index`` handling ``kind`` items."""

    def enqueue(self, items: Sequence[int], kind: Kind) -> None:
        """Make ``items`` available to workers; returns after the commit (or publish)."""

    def outstanding(self, kind: Kind, items: range) -> int:
        """How many of ``items`` are not yet recorded as complete."""

    def close(self) -> None:
        """Release the benchmark-side connections."""


@dataclass(frozen=True)
class Workload:
    """One measured scenario; the same for every system."""

    name: str
    kind: Kind
    items: int
    pods: int = 1
    history: int = 0
    # Latency probe: seconds between inserts, drawn uniformly from this range.
    gap: tuple[float, float] = (0.0, 0.0)
    title: str = ""


@dataclass
class RunResult:
    """What one run measured; figures are None where they do not apply."""

    system: str
    database: str
    workload: str
    repeat: int
    items: int
    pods: int
    history: int
    seconds: float | None = None
    items_per_s: float | None = None
    first_done_ms: float | None = None  # from the enqueue to the first completion seen
    steady_items_per_s: float | None = None  # the rate after the first completion seen
    enqueue_seconds: float | None = None
    cpu_ms_per_item: float | None = None
    db_cpu_ms_per_item: float | None = None
    cpu_percent: float | None = None  # worker CPU over the measured phase, % of one core
    db_conns_per_pod: float | None = None
    redis_conns_per_pod: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    latencies_ms: list[float] | None = None
    load_1m: float | None = None  # the host's load average when the run started
    partial: bool = False
    note: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ConnectionCounter:
    """Counts a pod's server-side sessions: the server's own view, matched by client port."""

    def __init__(self, pg_dsn: str, mariadb: Callable[[set[int]], int] | None = None) -> None:
        self._pg_dsn = pg_dsn
        self._pg: psycopg.Connection[Any] | None = None
        self._mariadb = mariadb

    def _pg_conn(self) -> psycopg.Connection[Any]:
        if self._pg is None or self._pg.closed:
            self._pg = psycopg.connect(self._pg_dsn, autocommit=True)
        return self._pg

    def count(self, database: Database, pod: procs.Pod) -> int | None:
        if database == "postgresql":
            ports = procs.tree_ports(pod, PG_PORT)
            if not ports:
                return 0
            try:
                row = self._pg_conn().execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                    (list(ports),),
                ).fetchone()
            except psycopg.OperationalError:
                self._pg = None  # PostgreSQL may be restarting (shared machine); skip this sample
                return None
            return int(row[0]) if row else 0
        if database == "mariadb" and self._mariadb is not None:
            return self._mariadb(procs.tree_ports(pod, MARIADB_PORT))
        return None  # SQLite: a file, no server sessions

    def backend_cpu(self, database: Database, pods: Sequence[procs.Pod]) -> dict[int, float]:
        """CPU seconds of the PostgreSQL backends serving the pods' connections, by pid.

        The server runs on this host, so its backends are ordinary processes; their CPU is the
        database-side cost of each system's queries, which worker-side CPU does not show.
        """
        if database != "postgresql":
            return {}
        ports = set().union(*(procs.tree_ports(pod, PG_PORT) for pod in pods))
        if not ports:
            return {}
        try:
            rows = self._pg_conn().execute(
                "SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", (list(ports),)
            ).fetchall()
        except psycopg.OperationalError:
            self._pg = None
            return {}
        cpu: dict[int, float] = {}
        for (pid,) in rows:
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(int(pid)).cpu_times()
                cpu[int(pid)] = t.user + t.system
        return cpu

    def close(self) -> None:
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``pct``% of values at or below."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(pct * len(ordered) / 100.0 - 1e-9)))
    return ordered[rank - 1]


def wait_done(
    system: System,
    kind: Kind,
    items: range,
    pods: Sequence[procs.Pod],
    *,
    timeout: float,
    budget: float | None = None,
    interval: float = 0.02,
    on_tick: Callable[[], None] | None = None,
) -> tuple[float, int, tuple[float, int] | None]:
    """Poll until every item is complete; return (perf_counter at that poll, 0, first).

    ``first`` is (perf_counter, items left) at the first poll that saw some but not all
    items complete, so a drain's wake-up delay can be told apart from its rate.

    With a ``budget`` (seconds), a drain still going when it runs out ends early and returns
    how many items were left, so a very slow system yields a rate instead of a timeout.
    Two consecutive empty polls are required, because a Redis broker moves a message from
    its queue to the unacked set in two steps.
    """
    begun = time.monotonic()
    deadline = begun + timeout
    last_tick = begun
    left = len(items)
    best, progressed = left, begun
    first: tuple[float, int] | None = None
    last_error: Exception | None = None
    while True:
        stamp = time.perf_counter()
        try:
            left = system.outstanding(kind, items)
        except Exception as exc:
            left = -1
            last_error = exc
        if first is None and 0 < left < len(items):
            first = (stamp, left)
        if left == 0:
            time.sleep(interval)
            with contextlib.suppress(Exception):
                if system.outstanding(kind, items) == 0:
                    return stamp, 0, first
        for pod in pods:
            if not pod.alive():
                raise RuntimeError(
                    f"a {system.name} worker exited (code {pod.process.returncode}) with "
                    f"{left} items outstanding; log {pod.log_path}:\n{pod.log_tail(8)}"
                )
        now = time.monotonic()
        if 0 <= left < best:
            best, progressed = left, now
        elif now - progressed > STALL_SECONDS:
            raise RuntimeError(
                f"{system.name}: stalled, {best} of {len(items)} items outstanding and none "
                f"completed for {STALL_SECONDS:.0f}s; see {pods[0].log_path}"
            )
        if budget is not None and now - begun > budget and 0 < best < len(items):
            return stamp, best, first
        if now > deadline:
            raise RuntimeError(
                f"{system.name}: {best} of {len(items)} items still outstanding after "
                f"{timeout:.0f}s (last error: {last_error!r}); see {pods[0].log_path}"
            )
        if on_tick is not None and now - last_tick > 0.5:
            last_tick = now
            on_tick()
        time.sleep(interval)


def reset_system(system: System, history: int) -> None:
    """Reset, riding out a server restart by another engineer's tests (shared machine)."""
    for attempt in range(RESET_ATTEMPTS):
        try:
            system.reset(history=history)
            return
        except Exception:
            if attempt == RESET_ATTEMPTS - 1:
                raise
            time.sleep(3.0)


def run_once(
    system: System,
    workload: Workload,
    *,
    repeat: int,
    counter: ConnectionCounter,
    redis_client: redis.Redis,
    log_dir: Path,
    cwd: Path,
    rng: random.Random,
    budget: float | None = None,
) -> RunResult:
    """Reset, start the pods, warm up, measure, stop the pods (always).

    ``budget`` bounds a drain's seconds: a slower drain ends early and reports the rate of
    the items it completed (``partial`` is set).
    """
    result = RunResult(
        system=system.name,
        database=system.database,
        workload=workload.name,
        repeat=repeat,
        items=workload.items,
        pods=workload.pods,
        history=workload.history,
    )
    history = workload.history if system.keeps_history else 0
    warm = range(history + 1, history + 1 + WARMUP_PER_POD * workload.pods)
    measured = range(warm.stop, warm.stop + workload.items)

    pods: list[procs.Pod] = []
    result.load_1m = round(os.getloadavg()[0], 2)
    try:
        reset_system(system, history)
        redis_client.delete(probe.LATENCY_KEY, probe.FINISH_KEY)
        for index in range(workload.pods):
            argv, env = system.pod_command(workload.kind, index)
            log_path = log_dir / f"{workload.name}-r{repeat}-{system.name}-pod{index}.log"
            pods.append(procs.start_pod(argv, env=env, log_path=log_path, cwd=cwd))
        procs.wait_alive(pods, 0.3)
        system.enqueue(list(warm), workload.kind)
        wait_done(system, workload.kind, warm, pods, timeout=180)
        done = workload.items

        db_samples: list[list[int]] = []
        redis_samples: list[int] = []

        def sample() -> None:
            per_pod = [counter.count(system.database, pod) for pod in pods]
            if all(c is not None for c in per_pod):
                db_samples.append([c for c in per_pod if c is not None])
            redis_samples.append(sum(len(procs.tree_ports(p, REDIS_PORT)) for p in pods))

        sample()
        db_cpu_before = counter.backend_cpu(system.database, pods)
        cpu_before = sum(procs.tree_cpu_seconds(p) for p in pods)
        phase_start = time.perf_counter()
        if workload.kind == "latency":
            measure_latency(system, workload, measured, pods, redis_client, rng, result, sample)
        elif workload.kind == "enable":
            _measure_enable(system, workload, measured, pods, redis_client, rng, result, sample)
        elif workload.kind == "dependent":
            _measure_dependent(system, workload, measured, pods, redis_client, rng, result, sample)
        else:
            done = measure_drain(system, workload, measured, pods, result, sample, budget)
        sample()
        cpu_after = sum(procs.tree_cpu_seconds(p) for p in pods)
        phase = time.perf_counter() - phase_start
        result.cpu_percent = (cpu_after - cpu_before) * 100.0 / phase / workload.pods
        db_cpu_after = counter.backend_cpu(system.database, pods)
        result.cpu_ms_per_item = (cpu_after - cpu_before) * 1000.0 / done
        if db_cpu_after:
            # Backends opened during the run count from zero.
            spent = sum(v - db_cpu_before.get(pid, 0.0) for pid, v in db_cpu_after.items())
            result.db_cpu_ms_per_item = spent * 1000.0 / done
        if db_samples:
            result.db_conns_per_pod = max(sum(s) for s in db_samples) / workload.pods
        result.redis_conns_per_pod = max(redis_samples) / workload.pods
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for pod in pods:
            procs.stop_pod(pod)
    return result


def measure_drain(
    system: System,
    workload: Workload,
    measured: range,
    pods: Sequence[procs.Pod],
    result: RunResult,
    sample: Callable[[], None],
    budget: float | None,
) -> int:
    """Time the drain; return how many items completed (all, unless the budget ran out)."""
    started = time.perf_counter()
    system.enqueue(list(measured), workload.kind)
    result.enqueue_seconds = time.perf_counter() - started
    timeout = max(180.0, workload.items / 10.0)
    finished, left, first = wait_done(
        system, workload.kind, measured, pods, timeout=timeout, budget=budget, on_tick=sample
    )
    done = workload.items - left
    result.seconds = finished - started
    result.items_per_s = done / result.seconds
    if first is not None and finished > first[0]:
        # Wake-up apart: how long until the first completion, and the rate from there on.
        result.first_done_ms = (first[0] - started) * 1000.0
        result.steady_items_per_s = (first[1] - left) / (finished - first[0])
    if left:
        result.partial = True
        result.note = f"budget of {budget:.0f}s ran out: {done} of {workload.items} items drained"
    return done


def measure_latency(
    system: System,
    workload: Workload,
    measured: range,
    pods: Sequence[procs.Pod],
    redis_client: redis.Redis,
    rng: random.Random,
    result: RunResult,
    sample: Callable[[], None],
) -> None:
    # Let the workers go idle first: the probe is about waking idle workers.
    time.sleep(1.0)
    committed: dict[int, float] = {}
    started = time.perf_counter()
    for item in measured:
        time.sleep(rng.uniform(*workload.gap))
        system.enqueue([item], workload.kind)
        committed[item] = time.time()
    result.enqueue_seconds = time.perf_counter() - started
    wait_done(system, workload.kind, measured, pods, timeout=120, on_tick=sample)
    starts = probe.read_starts(redis_client)
    _record_latencies(result, starts, committed)


def _record_latencies(
    result: RunResult, starts: dict[int, float], since: dict[int, float]
) -> None:
    missing = [i for i in since if i not in starts]
    if missing:
        raise RuntimeError(f"{len(missing)} handler starts were not recorded (first {missing[0]})")
    latencies = [(starts[i] - t) * 1000.0 for i, t in since.items()]
    result.latencies_ms = [round(v, 3) for v in latencies]
    result.latency_p50_ms = statistics.median(latencies)
    result.latency_p99_ms = percentile(latencies, 99)
    result.latency_max_ms = max(latencies)


def _wait_item(
    system: System, kind: Kind, item: int, pods: Sequence[procs.Pod], sample: Callable[[], None]
) -> None:
    """Wait until ``item`` is complete, one probe at a time (at most PROBE_TIMEOUT)."""
    wait_done(system, kind, range(item, item + 1), pods, timeout=PROBE_TIMEOUT,
               interval=0.01, on_tick=sample)  # fmt: skip


def _measure_enable(
    system: System,
    workload: Workload,
    measured: range,
    pods: Sequence[procs.Pod],
    redis_client: redis.Redis,
    rng: random.Random,
    result: RunResult,
    sample: Callable[[], None],
) -> None:
    """A row enabled behind the sweep's cursor, once per probe.

    In one commit: row B not eligible (`ready` false) and row R, a higher key, eligible. The
    worker claims R, so its sweep has passed B; once R is finished and a gap has passed
    idle, an UPDATE makes B eligible: timed from the UPDATE's commit to B's handler start.
    """
    gated: Any = system
    time.sleep(1.0)
    enabled: dict[int, float] = {}
    started = time.perf_counter()
    for n in range(workload.items):
        blocked, ready = measured.start + 2 * n, measured.start + 2 * n + 1
        gated.enqueue_gated(blocked, ready)
        _wait_item(system, workload.kind, ready, pods, sample)
        time.sleep(rng.uniform(*workload.gap))
        gated.enable(blocked)
        enabled[blocked] = time.time()
        _wait_item(system, workload.kind, blocked, pods, sample)
    result.enqueue_seconds = time.perf_counter() - started
    _record_latencies(result, probe.read_starts(redis_client), enabled)


def _measure_dependent(
    system: System,
    workload: Workload,
    measured: range,
    pods: Sequence[procs.Pod],
    redis_client: redis.Redis,
    rng: random.Random,
    result: RunResult,
    sample: Callable[[], None],
) -> None:
    """A dependent item whose dependency just finished, once per probe.

    One row of `bench_dep`: `dep_first` runs it (its handler's last act records the time),
    then `dep_second`, eligible once `dep_first`'s record is FINISHED. Timed from
    `dep_first`'s handler end (its outcome's commit follows) to `dep_second`'s handler start.
    Each probe starts after a gap of idleness.
    """
    time.sleep(1.0)
    started = time.perf_counter()
    for item in measured:
        time.sleep(rng.uniform(*workload.gap))
        system.enqueue([item], workload.kind)
        _wait_item(system, workload.kind, item, pods, sample)
    result.enqueue_seconds = time.perf_counter() - started
    finished = probe.read_starts(redis_client, probe.FINISH_KEY)
    missing = [i for i in measured if i not in finished]
    if missing:
        raise RuntimeError(f"{len(missing)} dep_first ends were not recorded (first {missing[0]})")
    _record_latencies(result, probe.read_starts(redis_client), {i: finished[i] for i in measured})
