"""dbworker: the benchmark's adapter, and the pod and migration commands it runs.

A pod is `python -m benchmarks.sys_dbworker serve` (a Coordinator started with one worker,
stopped on SIGTERM); `migrate` creates the tables as an init container would. The adapter
itself never imports dbworker: it resets the database, inserts source rows (that is the
enqueue) and reads completion from the documented work table (`<worker>_work`,
`execution_status = 'finished'`). Runs on PostgreSQL, SQLite (file) and MariaDB.

The configuration (issue 15) says how `migrate` sets the database up:
- `default`: `coordinator.upgrade_worker_tables()` and nothing else (the README's quick start,
  the operator's plain `dbworker migrate`);
- `no-triggers`: the documented opt-out, `upgrade_worker_tables(wakeup_triggers=False)`
  (a library without that keyword: plain `upgrade_worker_tables()`);
- `trigger`: `default` plus `coordinator.install_notify_triggers()` (0.1.0's opt-in
  PostgreSQL trigger, `dbworker migrate --notify-triggers`);
- `no-history`: `default`, with pods that record no attempt history
  (`Coordinator(history_attempts=0)`, issue 30): what the history costs a drain.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, MetaData, Table, column, create_engine, insert, table, text
from sqlalchemy.engine import make_url

from benchmarks.workloads import Database, Kind

ITEM_TABLE = table("bench_item", column("id"))
GATE_TABLE = table("bench_gate", column("id"), column("ready"))
DEP_TABLE = table("bench_dep", column("id"))
HISTORY_CHUNK = 10_000
CONFIGS = ("default", "no-triggers", "trigger", "no-history")
# Per benchmark kind: the source table it inserts into and the worker whose FINISHED marks
# an item complete (default: bench_item and the kind's own worker).
SOURCE_TABLES = {"enable": GATE_TABLE, "dependent": DEP_TABLE}
DONE_WORKER = {"dependent": "dep_second"}


def system_name(database: str, config: str) -> str:
    """`dbworker` is the default configuration on PostgreSQL; the rest carry suffixes."""
    name = "dbworker" if database == "postgresql" else f"dbworker-{database}"
    return name if config == "default" else f"{name}-{config}"


class DbworkerSystem:
    """Adapter for one database; the name carries the dialect unless it is PostgreSQL."""

    keeps_history = True

    def __init__(
        self, *, url: str, database: Database, concurrency: int, cwd: Path, config: str = "default",
        processes: int = 1, async_pool: int | None = None,
    ) -> None:
        if config not in CONFIGS:
            raise ValueError(f"unknown dbworker configuration {config!r}; choose from {CONFIGS}")
        self.database: Database = database
        self.config = config
        self.name = system_name(database, config)
        # What the last migrate did (library keyword present, triggers installed): the report's.
        self.migrate_info: dict[str, Any] = {}
        self._url = url
        self._concurrency = concurrency
        self._processes = processes  # handler processes of the async `io` worker
        self._async_pool = async_pool  # their connections each (None: the library's default)
        self._cwd = cwd
        self._engine: Engine | None = None

    def _eng(self) -> Engine:
        if self._engine is None:
            self._engine = create_engine(self._url, pool_pre_ping=True)
        return self._engine

    def reset(self, *, history: int, worker: str = "noop") -> None:
        self._wipe()
        # Tables come from the application's own start-up path, in a separate process, as
        # an init container would run it.
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.sys_dbworker", "migrate"],
            env={**os.environ, "BENCH_DB_URL": self._url, "BENCH_DBWORKER_CONFIG": self.config},
            cwd=str(self._cwd),
            capture_output=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        lines = done.stdout.decode().strip().splitlines()
        self.migrate_info = json.loads(lines[-1]) if lines else {}
        if history:
            self._add_history(history, worker)

    def _wipe(self) -> None:
        url = make_url(self._url)
        if self.database == "sqlite":
            if self._engine is not None:
                self._engine.dispose()
            path = Path(url.database or "")
            path.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            return
        # Server databases: drop every table the last run left (ours and dbworker's).
        if self.database == "postgresql":
            with self._eng().begin() as conn:
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
            return
        with self._eng().begin() as conn:
            meta = MetaData()
            meta.reflect(conn)
            meta.drop_all(conn)

    def _add_history(self, history: int, worker: str) -> None:
        """Items 1..history as a long-running deployment leaves them: FINISHED in <worker>_work."""
        engine = self._eng()
        work = Table(f"{worker}_work", MetaData(), autoload_with=engine)
        with engine.begin() as conn:
            for start in range(1, history + 1, HISTORY_CHUNK):
                ids = range(start, min(start + HISTORY_CHUNK, history + 1))
                conn.execute(insert(ITEM_TABLE), [{"id": i} for i in ids])
                conn.execute(
                    insert(work),
                    [{"source_id": i, **finished_row(work)} for i in ids],
                )
        if self.database == "postgresql":
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))

    def pod_command(self, kind: Kind, index: int) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable, "-m", "benchmarks.sys_dbworker", "serve",
            "--worker", kind, "--concurrency", str(self._concurrency),
            "--processes", str(self._processes),
        ]  # fmt: skip
        env = {"BENCH_DB_URL": self._url, "BENCH_DBWORKER_CONFIG": self.config}
        if self._async_pool is not None:
            env["BENCH_DBWORKER_ASYNC_POOL"] = str(self._async_pool)
        return argv, env

    def enqueue(self, items: Sequence[int], kind: Kind) -> None:
        source = SOURCE_TABLES.get(kind, ITEM_TABLE)
        rows: list[dict[str, Any]] = [{"id": i} for i in items]
        if kind == "enable":
            rows = [{"id": i, "ready": True} for i in items]
        with self._eng().begin() as conn:
            conn.execute(insert(source), rows)

    # The `enable` workload: a row inserted not eligible, made eligible later by an UPDATE.
    def enqueue_gated(self, blocked: int, ready: int) -> None:
        """In one commit: ``blocked`` not eligible, ``ready`` (a higher key) eligible."""
        with self._eng().begin() as conn:
            conn.execute(
                insert(GATE_TABLE), [{"id": blocked, "ready": False}, {"id": ready, "ready": True}]
            )

    def enable(self, item: int) -> None:
        """Make ``item`` eligible; returns after the UPDATE's commit."""
        with self._eng().begin() as conn:
            conn.execute(GATE_TABLE.update().where(GATE_TABLE.c.id == item).values(ready=True))

    def outstanding(self, kind: str, items: range) -> int:
        worker = DONE_WORKER.get(kind, kind)
        with self._eng().connect() as conn:
            done = conn.execute(
                text(
                    f"SELECT count(*) FROM {worker}_work WHERE source_id BETWEEN :lo AND :hi "
                    "AND execution_status = 'finished'"
                ),
                {"lo": items[0], "hi": items[-1]},
            ).scalar_one()
        return len(items) - int(done)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


def finished_row(work: Table) -> dict[str, Any]:
    """Column values of a FINISHED item, beyond source_id; SPEC's columns only."""
    return {"execution_status": "finished", "claim_token": None, "error": None}


# ---- inside the pods -------------------------------------------------------------------


def _serve(worker: str, concurrency: int, processes: int) -> None:
    from benchmarks import dbworker_app

    history = os.environ.get("BENCH_DBWORKER_CONFIG", "default") != "no-history"
    pool = os.environ.get("BENCH_DBWORKER_ASYNC_POOL")  # each handler process's connections, all kept
    options = {"pool_size": int(pool), "max_overflow": 0} if pool else None
    coordinator = dbworker_app.build_coordinator(os.environ["BENCH_DB_URL"], concurrency=concurrency,
                                                 history=history, processes=processes, engine_options=options)  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    coordinator.start(workers=dbworker_app.POD_WORKERS.get(worker, [worker]))
    stop.wait()
    coordinator.stop(timeout=10)


def has_wakeup_option(coordinator: Any) -> bool:
    """Whether this library's upgrade_worker_tables() takes ``wakeup_triggers`` (issue 15)."""
    return "wakeup_triggers" in inspect.signature(coordinator.upgrade_worker_tables).parameters


def migrate(coordinator: Any, config: str) -> dict[str, Any]:
    """Set the work tables up the way ``config`` says; what was done, for the report."""
    keyword = has_wakeup_option(coordinator)
    if config == "no-triggers" and keyword:
        steps = coordinator.upgrade_worker_tables(wakeup_triggers=False)
    else:
        steps = coordinator.upgrade_worker_tables()
    if config == "trigger":
        # The opt-in wake-up trigger on the source tables (PostgreSQL; a no-op elsewhere), as
        # `dbworker migrate --notify-triggers` installs it.
        steps = [*(steps or []), *(coordinator.install_notify_triggers() or [])]
    return {"config": config, "wakeup_triggers_keyword": keyword, "steps": [str(s) for s in steps or []]}


def _migrate() -> None:
    from benchmarks import dbworker_app

    url = os.environ["BENCH_DB_URL"]
    coordinator = dbworker_app.build_coordinator(url, concurrency=1)
    dbworker_app.Base.metadata.create_all(create_engine(url))
    info = migrate(coordinator, os.environ.get("BENCH_DBWORKER_CONFIG", "default"))
    print(json.dumps(info), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="dbworker benchmark pod (URL in BENCH_DB_URL)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one worker until SIGTERM")
    serve.add_argument(
        "--worker", required=True,
        choices=["noop", "write", "latency", "enable", "dependent", "io", "io_sync"],
    )
    serve.add_argument("--concurrency", type=int, default=2)
    serve.add_argument("--processes", type=int, default=1, help="handler processes of the async io worker")
    sub.add_parser("migrate", help="create the tables and exit")
    args = parser.parse_args()
    if args.command == "serve":
        _serve(args.worker, args.concurrency, args.processes)
    else:
        _migrate()


if __name__ == "__main__":
    main()
