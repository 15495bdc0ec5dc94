"""What OpenTelemetry costs dbworker (issue 31): drain rate and pick-up latency in three modes.

``off``: the extra absent (every ``opentelemetry`` import is blocked in the pod process and
its handler processes); ``idle``: installed, not configured (no provider, no ``OTEL_*``);
``export``: spans exported over OTLP/HTTP to a local receiver that discards them, the
writer's engine instrumented and its writes in a span (the trace table written and read).
Each mode runs in a fresh process, in a rotating order per repeat; printed as a table.

    .venv/bin/python -m benchmarks.otel_cost --db postgresql --items 2000 --probes 40 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished

ROOT = Path(__file__).resolve().parents[1]
URLS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/dbworker_otelbench",
    "mariadb": "mysql+pymysql://root@127.0.0.1:3306/dbworker_otelbench",
}
BLOCK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(name)
sys.meta_path.insert(0, _Block())
"""


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "otelbench_jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int] = mapped_column(default=0)


class Picked(Base):
    __tablename__ = "otelbench_picked"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column()
    at: Mapped[float] = mapped_column(sa.Double)


def handle(job: Job, session: Session) -> Finished:
    session.add(Picked(job_id=job.id, at=time.time()))
    return Finished()


def _database(kind: str, sqlite_dir: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{sqlite_dir}/otelbench.sqlite"
    url = sa.make_url(URLS[kind])
    admin = sa.create_engine(url.set(database="postgres" if kind == "postgresql" else "test"),
                             isolation_level="AUTOCOMMIT")  # fmt: skip
    with admin.connect() as conn:
        if kind == "postgresql":
            if not conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": url.database}).first():
                conn.exec_driver_sql(f'CREATE DATABASE "{url.database}"')
        else:
            conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS `{url.database}`")
    admin.dispose()
    return URLS[kind]


def _cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _server(url: str) -> dict[int, float]:
    """CPU seconds so far of the database server's processes that serve this benchmark: on
    PostgreSQL the backends of its database (their titles name it), on MariaDB the server
    (all of it: other clients on the machine count too); by pid."""
    database = sa.make_url(url).database or ""
    postgres = url.startswith("postgresql")
    found: dict[int, float] = {}
    for proc in psutil.process_iter(["name", "cmdline"]):
        name = proc.info["name"] or ""
        if postgres:
            if not name.startswith("postgres") or f" {database} " not in " ".join(proc.info["cmdline"] or ()) + " ":
                continue
        elif not name.startswith(("mariadbd", "mysqld")):
            continue
        found[proc.pid] = _cpu_seconds([proc])
    return found


def _server_since(url: str, before: dict[int, float]) -> float:
    """CPU seconds of ``_server`` since ``before`` (backends opened since count whole)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in _server(url).items())


def pod(url: str, mode: str, items: int, probes: int) -> dict[str, Any]:
    """One measured run in this process (see the module's doc); returns the figures."""
    engine = sa.create_engine(url)
    for table in ("otelbench_work", "otelbench_history", "dbworker_traces_otelbench_jobs"):
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    Base.metadata.drop_all(engine)
    coordinator = Coordinator(sessionmaker(engine), database_url=url, poll_seconds=0.05, max_poll_seconds=0.5)
    coordinator.transactional_worker(name="otelbench", source=Job, concurrency=2)(handle)
    Base.metadata.create_all(engine, tables=[Job.__table__, Picked.__table__])  # type: ignore[list-item]
    coordinator.create_worker_tables()
    writer = sa.create_engine(url)
    span: Any = None
    if mode == "export":
        from opentelemetry import trace

        import dbworker.otel

        dbworker.otel.instrument(writer)
        span = trace.get_tracer("bench")

    def write(count: int) -> float:
        def commit() -> float:
            with Session(writer) as s:
                s.add_all([Job() for _ in range(count)])
                s.commit()
            return time.time()

        if span is None:
            return commit()
        with span.start_as_current_span("POST /jobs"):
            return commit()

    def picked() -> int:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(Picked)).scalar_one())

    coordinator.start()
    try:
        write(20)  # warm-up: every slot ran, every connection open
        while picked() < 20:
            time.sleep(0.02)
        latencies = []
        for _ in range(probes):
            before = picked()
            committed = write(1)
            while picked() == before:
                time.sleep(0.002)
            with engine.connect() as conn:
                at = conn.execute(sa.select(sa.func.max(Picked.at))).scalar_one()
            latencies.append(at - committed)
            time.sleep(0.1)
        me = psutil.Process()
        handlers = me.children(recursive=True)
        server = {} if url.startswith("sqlite") else _server(url)
        cpu = (_cpu_seconds([me]), _cpu_seconds(handlers))
        before = picked()
        start = time.time()
        writer_cpu = time.thread_time()
        write(items)
        writer_cpu = time.thread_time() - writer_cpu
        while picked() < before + items:
            time.sleep(0.02)
        seconds = time.time() - start
        pod_cpu, handlers_cpu = _cpu_seconds([me]) - cpu[0] - writer_cpu, _cpu_seconds(handlers) - cpu[1]
        server_cpu = 0.0 if url.startswith("sqlite") else _server_since(url, server)
    finally:
        coordinator.stop(timeout=30)
    per_item = 1000 / items
    return {"mode": mode, "items_per_s": items / seconds, "pickup_p50_ms": 1000 * statistics.median(latencies),
            "pod_ms": pod_cpu * per_item, "handlers_ms": handlers_cpu * per_item,
            "writer_ms": writer_cpu * per_item, "server_ms": server_cpu * per_item}  # fmt: skip


def write_cost(url: str, writes: int) -> dict[str, float]:
    """Milliseconds per one-row ORM commit: plain engine, instrumented with no span current,
    instrumented inside a span (the trace row written in the same transaction), interleaved."""
    from opentelemetry.sdk.trace import TracerProvider

    import dbworker.otel

    tracer = TracerProvider().get_tracer("bench")  # records, exports nowhere
    plain, traced = sa.create_engine(url), sa.create_engine(url)
    dbworker.otel.instrument(traced)
    times: dict[str, list[float]] = {"plain": [], "instrumented, no span": [], "instrumented, in a span": []}

    def one(engine: sa.Engine) -> float:
        start = time.perf_counter()
        with Session(engine) as s:
            s.add(Job())
            s.commit()
        return time.perf_counter() - start

    for _ in range(writes):
        times["plain"].append(one(plain))
        times["instrumented, no span"].append(one(traced))
        with tracer.start_as_current_span("write"):
            times["instrumented, in a span"].append(one(traced))
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


# CPU per drained item: the pod process but its writer thread (coordinator, spans, export),
# the handler processes, the writer (the application's ORM commit, instrumented in export),
# the database server (PostgreSQL: the backends of the benchmark's database; MariaDB: all of it).
CPU = {"pod_ms": "pod", "handlers_ms": "handlers", "writer_ms": "writer", "server_ms": "server"}


def _cpu(figures: dict[str, Any]) -> str:
    return " ".join(f"{name} {figures[key]:.2f}" for key, name in CPU.items())


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="postgresql", choices=["postgresql", "sqlite", "mariadb"])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writes", type=int, default=300, help="one-row commits per kind, for the per-write cost")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="also run each mode with dbworker from this checkout (e.g. a worktree of main), "
                             "interleaved: '<mode>@against' rows, compared with its own off")  # fmt: skip
    parser.add_argument("--run", nargs=2, metavar=("URL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        if args.run[1] == "off":
            try:
                import opentelemetry  # noqa: F401 - must fail: the sitecustomize blocks it
            except ImportError:
                pass
            else:
                sys.exit("off: opentelemetry is importable; the block did not apply")
        print(json.dumps(pod(args.run[0], args.run[1], args.items, args.probes)))
        return
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    kinds = ["off", "idle", "export"]
    modes = kinds + ([f"{m}@against" for m in kinds] if args.against else [])
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        url = _database(args.db, tmp)
        blocked = Path(tmp) / "blocked"  # "off": a sitecustomize that handler processes inherit too
        blocked.mkdir()
        (blocked / "sitecustomize.py").write_text(BLOCK)
        base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        base["PYTHONPATH"] = os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")])
        for repeat in range(args.repeats):
            for mode in modes[repeat % len(modes):] + modes[: repeat % len(modes)]:
                env = dict(base)
                kind, against = mode.partition("@")[::2]
                # The other checkout's dbworker (first on the path) with this benchmark, as a script.
                target = [str(Path(__file__).resolve())] if against else ["-m", "benchmarks.otel_cost"]
                if against:
                    env["PYTHONPATH"] = os.pathsep.join([str(args.against.resolve()), env["PYTHONPATH"]])
                if kind == "off":
                    env["PYTHONPATH"] = os.pathsep.join([str(blocked), env["PYTHONPATH"]])
                if kind == "export":
                    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.server_address[1]}",
                               OTEL_SERVICE_NAME="otelbench")  # fmt: skip
                command = [sys.executable, *target, "--items", str(args.items),
                           "--probes", str(args.probes), "--run", url, kind]  # fmt: skip
                done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
                if done.returncode != 0:
                    sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results[mode].append(result)
                print(f"repeat {repeat + 1} {mode:14} {result['items_per_s']:8.1f} items/s  "
                      f"pick-up p50 {result['pickup_p50_ms']:6.1f} ms  CPU ms/item: {_cpu(result)}  "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        if args.writes:
            cost = write_cost(url, args.writes)
    sink.shutdown()
    if args.writes:
        print(f"\nper one-row ORM commit ({args.writes} each, median): "
              + ", ".join(f"{k} {v:.2f} ms" for k, v in cost.items()))
    print(f"\n{args.db}, {args.items} items per drain, {args.probes} pick-up probes, {args.repeats} repeats "
          "(median, min-max)")  # fmt: skip
    for mode in modes:
        against = mode.partition("@")[2]
        off = statistics.median(r["items_per_s"] for r in results[f"off@{against}" if against else "off"])
        rates = [r["items_per_s"] for r in results[mode]]
        p50s = [r["pickup_p50_ms"] for r in results[mode]]
        print(f"{mode:14} drain {statistics.median(rates):8.1f} items/s ({min(rates):.1f}-{max(rates):.1f}, "
              f"{100 * (statistics.median(rates) / off - 1):+.1f}% vs off)  pick-up p50 "
              f"{statistics.median(p50s):6.1f} ms ({min(p50s):.1f}-{max(p50s):.1f})")  # fmt: skip
        medians = {k: statistics.median(r[k] for r in results[mode]) for k in CPU}
        print(f"{'':14} CPU ms/item (median): {_cpu(medians)}")


if __name__ == "__main__":
    main()
