"""PostgreSQL through PgBouncer in transaction mode (Debian's package), in every pass.

Coordinator and handler processes go through the pooler; LISTEN goes to the server itself
on ``listen_url``, or nowhere (poll-only). Without ``transaction_pooler`` the pooler's
prepared-statement errors are logged with the setting that fixes them. ``dbworker migrate``,
``cancel``, ``retry`` and ``inspect`` work through it; schema steps lock per transaction.
Handler processes with ``NullPool`` hold no connection between items.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from dbworker import Coordinator, ExecutionStatus
from dbworker.sql import poolers
from tests import pooler
from tests.acceptance import app as taskapp
from tests.acceptance.support import APP, ROOT, Worker, dbworker_command
from tests.apps import basic
from tests.conftest import Database
from tests.helpers import wait_until

FAST = {"poll_seconds": 0.05, "max_poll_seconds": 0.5}
SLOW = {"poll_seconds": 600, "max_poll_seconds": 600}  # only a wake-up claims within the bounds


@dataclass
class Pooled:
    """A fresh database on the test server, reached through PgBouncer (``url``) or not."""

    name: str
    url: str  # through PgBouncer
    direct: str  # the server itself
    engine: sa.Engine  # the test's own, direct


@pytest.fixture(scope="module")
def bouncer() -> Iterator[pooler.Bouncer]:
    b = pooler.Bouncer()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def pooled(bouncer: pooler.Bouncer) -> Iterator[Pooled]:
    name = "dbw_" + secrets.token_hex(6)
    pooler.create_database(name)
    direct = pooler.direct_url(bouncer.url(name))
    engine = sa.create_engine(direct)
    try:
        yield Pooled(name, bouncer.url(name), direct, engine)
    finally:
        engine.dispose()
        pooler.drop_database(name)


def _outputs(engine: sa.Engine) -> list[tuple[int, int]]:
    with Session(engine) as s:
        return [(o.item_id, o.run) for o in s.scalars(sa.select(basic.Output))]


def _all_finished(c: Coordinator, engine: sa.Engine, ids: list[int]) -> bool:
    with Session(engine) as s:
        return all(c.execution_status(s, worker="items", source_id=i) == ExecutionStatus.FINISHED for i in ids)


def _listening(pooled: Pooled) -> int:
    with pooled.engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND query LIKE 'LISTEN%'"
        ), {"db": pooled.name}).scalar_one())  # fmt: skip


def test_items_committed_once_through_pgbouncer_woken_by_the_direct_listener(
    pooled: Pooled, coordinators: list[Coordinator]
) -> None:
    # Two coordinators, handlers all through the pooler; polls too slow to matter, so every
    # pick-up after start is a NOTIFY sent through the pooler and heard on listen_url.
    for _ in range(2):
        c = basic.build(pooled.url, concurrency=4, transaction_pooler=True, listen_url=pooled.direct, **SLOW)
        coordinators.append(c)
        c.start()
    wait_until(lambda: _listening(pooled) == 2, what="both listeners LISTENing on the server itself")
    ids = basic.add_items(pooled.engine, ["finish"] * 120)
    wait_until(lambda: _all_finished(coordinators[0], pooled.engine, ids), what="120 items finished")
    assert sorted(_outputs(pooled.engine)) == [(i, 1) for i in ids]  # one committed run each


def test_poll_only_without_listen_url_says_so(
    pooled: Pooled, coordinators: list[Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dbworker")
    c = basic.build(pooled.url, concurrency=2, transaction_pooler=True, **FAST)
    coordinators.append(c)
    ids = basic.add_items(pooled.engine, ["finish"] * 20)
    c.start()
    wait_until(lambda: _all_finished(c, pooled.engine, ids), what="20 items finished by polling")
    assert sorted(_outputs(pooled.engine)) == [(i, 1) for i in ids]
    assert [r.getMessage() for r in caplog.records].count(poolers.POLL_ONLY) == 1
    assert _listening(pooled) == 0


def test_prepared_statement_errors_name_the_setting_once(
    pooled: Pooled, coordinators: list[Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dbworker")
    c = basic.build(pooled.url, concurrency=4, **FAST)  # through the pooler, setting left off
    coordinators.append(c)
    basic.add_items(pooled.engine, ["finish"] * 200)
    c.start()

    def hints() -> list[logging.LogRecord]:
        return [r for r in caplog.records if poolers.HINT in r.getMessage()]

    wait_until(hints, what="the error naming transaction_pooler=True")
    c.stop(5)
    [hint] = hints()
    assert hint.levelno == logging.ERROR and "DBWORKER_TRANSACTION_POOLER=true" in hint.getMessage()


def _command(pooled: Pooled, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBWORKER_")}
    env.update(DATABASE_URL=pooled.url, PYTHONPATH=str(ROOT), DBWORKER_TRANSACTION_POOLER="true")
    return subprocess.run(dbworker_command(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_migrate_cancel_retry_and_inspect_through_pgbouncer(pooled: Pooled) -> None:
    taskapp.Base.metadata.tables["tasks"].create(pooled.engine)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBWORKER_")}
    env.update(DATABASE_URL=pooled.url, PYTHONPATH=str(ROOT), DBWORKER_TRANSACTION_POOLER="true")
    migrations = [
        subprocess.Popen(
            dbworker_command("migrate", APP), cwd=ROOT, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    for p in migrations:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "work tables up to date: main_work, other_work" in out
    with Session(pooled.engine) as s:
        s.add_all([taskapp.Task(id=1), taskapp.Task(id=2)])
        s.commit()
    cancelled = _command(pooled, "cancel", APP, "--worker", "main", "1")
    assert cancelled.returncode == 0 and "cancelled 1 item(s)" in cancelled.stdout, cancelled.stderr
    retried = _command(pooled, "retry", APP, "--worker", "main", "1")
    assert retried.returncode == 0 and "reset 1 failed item(s)" in retried.stdout, retried.stderr
    inspected = _command(pooled, "inspect", APP, "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = {w["worker"]: w for w in json.loads(inspected.stdout)["workers"]}
    assert report["main"]["counts"] == {"working": 0, "unfinished": 1, "finished": 0, "failed": 0}
    assert report["main"]["claimable"] == 2


def test_schema_steps_take_the_lock_in_each_of_their_transactions(pg: Database) -> None:
    # Every transaction of a migration that changes the schema begins with the
    # transaction-scoped lock; no session-level lock is ever taken.
    transactions: list[list[str]] = [[]]
    engine = sa.create_engine(pg.url, **pooler.engine_options(pg.url))

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        transactions[-1].append(statement)

    @event.listens_for(engine, "commit")
    def committed(conn: Any) -> None:
        transactions.append([])

    basic.create_app_tables(pg.engine)
    c = Coordinator(sa.orm.sessionmaker(engine), database_url=pg.url)
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    assert c.create_worker_tables()  # created: it changed something
    changing = [t for t in transactions if any(s.lstrip().upper().startswith(("CREATE", "ALTER")) for s in t)]
    assert changing
    for statements in changing:
        assert "pg_advisory_xact_lock" in statements[0], statements[:2]
    assert not any("pg_advisory_lock(" in s for t in transactions for s in t)
    engine.dispose()


def _holds_server_connection(pid: int, port: int) -> bool:
    return any(
        conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
        for conn in psutil.Process(pid).net_connections(kind="tcp")
    )


@pytest.mark.parametrize("per_item", [True, False], ids=["nullpool", "pooled"])
def test_handler_processes_with_nullpool_hold_no_connection_between_items(
    pg: Database, coordinators: list[Coordinator], per_item: bool
) -> None:
    options = {"poolclass": NullPool} if per_item else {}
    c = basic.build(pg.url, concurrency=2, engine_options=options, **FAST)
    coordinators.append(c)
    ids = basic.add_items(pg.engine, ["sleep:0"] * 10)  # each records the process that ran it
    c.start()
    wait_until(lambda: _all_finished(c, pg.engine, ids), what="10 items finished")
    port = make_url(pg.url).port or 5432
    with Session(pg.engine) as s:
        ran = set(s.scalars(sa.select(basic.Started.pid)))
    pids = wait_until(lambda: len(c.handler_pids()) == 2 and c.handler_pids(), what="two handler processes")
    held = [_holds_server_connection(pid, port) for pid in pids if pid in ran]
    # The default pool keeps the connection of each process that ran an item; NullPool
    # closes it after each item.
    assert held and held == [not per_item] * len(held)


def test_dbworker_run_through_pgbouncer_from_its_variables(pooled: Pooled, tmp_path: Any) -> None:
    # The pod's way: DATABASE_URL on the pooler and the two variables.
    taskapp.Base.metadata.tables["tasks"].create(pooled.engine)
    worker = Worker(
        pooled.url, tmp_path, "--create-tables", "--concurrency", "main=4",
        env={"DBWORKER_TRANSACTION_POOLER": "true", "DBWORKER_LISTEN_URL": pooled.direct},
    )  # fmt: skip
    try:
        worker.wait_ready()
        wait_until(lambda: _listening(pooled) == 1, what="the pod's listener on the server itself")
        with Session(pooled.engine) as s:
            s.add_all([taskapp.Task(id=i) for i in range(1, 41)])
            s.commit()

        def done() -> bool:
            with Session(pooled.engine) as s:
                return s.scalar(sa.select(sa.func.count()).where(taskapp.Task.result.is_not(None))) == 40

        wait_until(done, what="40 tasks handled through the pooler")
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.log_tail()
        assert "prepared statement" not in worker.log_text()
    finally:
        worker.close()
