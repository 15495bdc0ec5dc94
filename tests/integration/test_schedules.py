"""Scheduled and periodic work on real servers: ``due=`` rows picked up on time with polls
of 120 s, and ``periodic`` ticks run exactly once by three coordinator processes, taken over
after a SIGKILLed coordinator, and caught up after downtime as ``catch_up`` says.
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import dbworker
from dbworker import Coordinator, ExecutionStatus
from dbworker.pod import admin
from dbworker.schedules import ticks
from tests.apps import periodic
from tests.conftest import Database
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
SLOW = {"poll_seconds": 120, "max_poll_seconds": 120}  # only wake-ups and due times find work
ON_TIME = 3.0  # "within about a second": a generous bound, far below the 120 s poll


class Processes:
    """``tests.apps.periodic`` coordinators as processes of their own; killed at teardown."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs  # each process's log, kept for a failed test's post-mortem
        self.started: list[subprocess.Popen[str]] = []
        self._count = 0

    def start(self, *args: str, env: dict[str, str] | None = None, says: str = "started") -> subprocess.Popen[str]:
        self._count += 1
        with (self.logs / f"coordinator-{self._count}.log").open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.apps.periodic", self.url, *args],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
        self.started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != says:  # its stderr says why (a start-up error, a traceback)
            proc.wait(timeout=30)
            log_text = (self.logs / f"coordinator-{self._count}.log").read_text()[-4000:]
            raise AssertionError(f"coordinator process said {line!r}; its log ends:\n{log_text}")
        return proc

    def stop_all(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.started:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGUSR1)  # its threads' stacks, to the test's stderr
                time.sleep(1)
                raise
        # A misconfigured pod (through PgBouncer without transaction_pooler) still runs most
        # ticks on retries: its database errors are what shows it.
        errors = [line for f in sorted(self.logs.glob("coordinator-*.log")) for line in f.read_text().splitlines()
                  if "database error" in line]  # fmt: skip
        assert not errors, f"the coordinators logged database errors: {errors[:5]}"

    def close(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


@pytest.fixture
def processes(db: Database, tmp_path: Path) -> Iterator[Processes]:
    periodic.build(db.url)  # the tables, before any process races to create them
    p = Processes(db.url, tmp_path)
    try:
        yield p
    finally:
        p.close()


def runs(db: Database) -> list[periodic.Run]:
    with Session(db.engine) as s:
        return list(s.scalars(sa.select(periodic.Run).order_by(periodic.Run.due_at)))


def tick_rows(db: Database) -> list[tuple[int, dt.datetime, str | None]]:
    """Every tick of ``sync``: id, due time, work status (None: never claimed)."""
    table = ticks.Tick.metadata.tables["sync_work"]
    query = (
        sa.select(ticks.TABLE.c.id, ticks.TABLE.c.due_at, table.c.execution_status)
        .outerjoin(table, table.c.source_id == ticks.TABLE.c.id)
        .where(ticks.TABLE.c.name == "sync")
        .order_by(ticks.TABLE.c.due_at)
    )
    with db.engine.connect() as conn:
        return [(i, d, s) for i, d, s in conn.execute(query)]


def assert_each_due_time_ran_once(db: Database, every: float) -> list[dt.datetime]:
    """No due time ran twice, ticks are unique, and between the first and the last run none
    was skipped; returns the due times that ran."""
    ran = [r.due_at for r in runs(db)]
    twice = [d for d, n in collections.Counter(ran).items() if n > 1]
    assert not twice, f"due times that ran more than once: {twice}"
    all_ticks = tick_rows(db)
    assert len({d for _, d, _ in all_ticks}) == len(all_ticks)
    steps = {(b - a).total_seconds() for a, b in itertools.pairwise(ran)}
    assert steps <= {every}, f"due times skipped between runs: steps {sorted(steps)}"
    finished = [d for _, d, s in all_ticks if s == ExecutionStatus.FINISHED.value]
    assert finished == ran  # every tick that finished committed its run once
    return ran


@pytest.mark.slow
def test_three_coordinators_run_every_due_time_of_every_1_exactly_once(db: Database, processes: Processes) -> None:
    for _ in range(3):
        processes.start("--every", "1")
    wait_until(lambda: len(runs(db)) >= 10, timeout=90, what="ten ticks to run (about 10 s)")
    processes.stop_all()
    ran = assert_each_due_time_ran_once(db, every=1)
    assert len(ran) >= 10
    # Every tick but those due while the fleet stopped ran (none was left behind).
    unclaimed = [d for _, d, s in tick_rows(db) if s is None]
    assert all(d > ran[-1] for d in unclaimed), f"ticks never claimed: {unclaimed}"


@pytest.mark.slow
def test_a_tick_whose_coordinator_was_killed_mid_tick_is_taken_over_and_runs_once(
    db: Database, processes: Processes, tmp_path: Path
) -> None:
    victim = processes.start("--every", "1", "--lease", "3", env={"DBW_TEST_HOLD": str(tmp_path)})
    held = tmp_path / "held"
    wait_until(held.exists, timeout=60, what="a tick to start in the first coordinator")
    wait_until(lambda: held.read_text().strip(), timeout=10, what="the held tick's id")
    tick_id = int(held.read_text())
    processes.start("--every", "1", "--lease", "3")  # the rest of the fleet, running on
    processes.start("--every", "1", "--lease", "3")
    victim.kill()  # SIGKILL: its handler process exits by itself, the lease runs out
    victim.wait(timeout=30)
    wait_until(lambda: any(r.tick_id == tick_id for r in runs(db)), timeout=60, what=f"tick {tick_id} to run")
    last = max(r.due_at for r in runs(db))
    wait_until(lambda: max(r.due_at for r in runs(db)) >= last + dt.timedelta(seconds=2), timeout=60,
               what="two more ticks after the take-over")  # fmt: skip
    processes.stop_all()
    assert [r.tick_id for r in runs(db)].count(tick_id) == 1
    c = periodic.build(db.url)
    with Session(db.engine) as s:
        state = c.workers["sync"].state(s, tick_id)
    assert state is not None and state["execution_status"] is ExecutionStatus.FINISHED
    assert state["attempts"] == 2  # the killed attempt counts: it was taken over
    assert_each_due_time_ran_once(db, every=1)


@pytest.mark.slow
def test_after_all_coordinators_stopped_exactly_catch_up_missed_ticks_run_at_restart(
    db: Database, processes: Processes, tmp_path: Path
) -> None:
    every = ("--every", "4", "--catch-up", "2")
    for _ in range(3):
        processes.start(*every)
    wait_until(lambda: len(runs(db)) >= 2, timeout=60, what="two ticks to run")
    processes.stop_all()
    last = max(d for _, d, _ in tick_rows(db))
    # Down for at least 14 s (three due times or more), and back 1.0-1.6 s after a due time:
    # the latest due time before the restart is missed too (over a second late), and the
    # next one is 2.4 s away, well after the start (imported and migrated before).
    go = tmp_path / "go"
    processes.started.clear()
    first = processes.start(*every, "--start-on", str(go), says="built")
    wait_until(
        lambda: dbworker.now() > last + dt.timedelta(seconds=14) and 1.0 <= time.time() % 4 <= 1.6,
        timeout=30, interval=0.01, what="the end of the downtime",
    )  # fmt: skip
    restart = dbworker.now()
    go.touch()
    assert first.stdout is not None and first.stdout.readline().strip() == "started"
    wait_until(lambda: any(r.due_at > restart for r in runs(db)), timeout=60, what="a tick due after the restart")
    processes.start(*every)
    processes.start(*every)
    wait_until(lambda: len([r for r in runs(db) if r.due_at > restart]) >= 2, timeout=60, what="two more ticks")
    processes.stop_all()
    seconds = restart.replace(microsecond=0) - dt.datetime(1970, 1, 1)
    latest = restart.replace(microsecond=0) - dt.timedelta(seconds=seconds.total_seconds() % 4)
    gap = [d for _, d, _ in tick_rows(db) if last < d < restart]
    assert gap == [latest - dt.timedelta(seconds=4), latest], (last, restart, tick_rows(db))  # the two most recent
    ran = [r.due_at for r in runs(db)]
    assert all(ran.count(d) == 1 for d in gap)
    after = [d for d in ran if d > restart]
    assert after[:2] == [latest + dt.timedelta(seconds=4), latest + dt.timedelta(seconds=8)]  # then on time


# Bounds how late a row is picked up: parallel workers sharing the cores would stretch it.
@pytest.mark.serial
def test_due_rows_are_picked_up_on_time_with_polls_of_120_s(db: Database) -> None:
    c = periodic.build(db.url, **SLOW)
    c.start(["publish"])
    try:
        now = dbworker.now()
        with Session(db.engine) as s:
            later = periodic.Post(publish_at=now + dt.timedelta(seconds=8))
            never = periodic.Post(publish_at=None)
            draft = periodic.Post(publish_at=now, draft=True)
            past = periodic.Post(publish_at=now - dt.timedelta(days=1))
            s.add_all([later, never, draft, past])
            s.commit()
            ids = {"later": later.id, "never": never.id, "draft": draft.id, "past": past.id}
        # Added after the fleet began waiting for `later`, due before it.
        with Session(db.engine) as s:
            sooner = periodic.Post(publish_at=dbworker.now() + dt.timedelta(seconds=3))
            s.add(sooner)
            s.commit()
            ids["sooner"] = sooner.id

        def published(name: str) -> dt.datetime | None:
            with Session(db.engine) as s:
                post = s.get(periodic.Post, ids[name])
                assert post is not None
                return post.published_at

        for name in ("past", "sooner", "later"):
            wait_until(lambda n=name: published(n), timeout=60, what=f"post {name} to be published")  # type: ignore[misc]
        with Session(db.engine) as s:
            for name in ("sooner", "later"):
                post = s.get(periodic.Post, ids[name])
                assert post is not None and post.publish_at is not None and post.published_at is not None
                late = (post.published_at - post.publish_at).total_seconds()
                assert -0.05 <= late <= ON_TIME, f"post {name} published {late:.3f} s after its time"
            assert c.execution_status(s, worker="publish", source_id=ids["never"]) is None
            assert c.execution_status(s, worker="publish", source_id=ids["draft"]) is None
    finally:
        c.stop(timeout=10)


def test_inspect_lists_schedules_with_their_next_due_time_and_last_result(db: Database) -> None:
    c = periodic.build(db.url, every=1)
    c.start(["sync"])
    try:
        wait_until(lambda: len(runs(db)) >= 1, timeout=60, what="a tick to run")
    finally:
        c.stop(timeout=10)
    # The next due time after the report's own now: between the clock read just before it and
    # a second after the one just after it (under load the report itself may take seconds).
    before = dbworker.now()
    report = admin.inspect_report(c, ["sync", "publish"], failed=False)
    after = dbworker.now()
    schedule = report[0]["schedule"]
    assert schedule["schedule"] == "every 1 s" and "schedule" not in report[1]
    assert before - dt.timedelta(seconds=1) < schedule["next_due_at"] <= after + dt.timedelta(seconds=1), (before, after)
    last: dict[str, Any] = schedule["last"]
    assert last["execution_status"] == "finished" and last["due_at"] == runs(db)[-1].due_at
    text = admin.render_schedules(report)
    assert text.startswith("  sync: every 1 s; next due ") and "finished" in text


def test_ended_ticks_past_their_retention_are_removed_with_their_work_rows(db: Database) -> None:
    c = periodic.build(db.url)
    table = c.workers["sync"].table
    old = dbworker.now() - dt.timedelta(days=30)
    with db.engine.connect() as conn:
        ticks.insert(conn, "sync", [old + dt.timedelta(seconds=n) for n in range(4)])
        ids = [i for i, _, _ in tick_rows(db)]
        statuses = ["finished", "failed", "unfinished", "finished"]  # the last is the latest tick
        conn.execute(sa.insert(table), [
            {"source_id": i, "execution_status": st, "attempts": 1} for i, st in zip(ids, statuses, strict=True)
        ])  # fmt: skip
        conn.commit()
        assert ticks.prune(conn, "sync", table, before=dbworker.now() - dt.timedelta(days=7)) == 2
        assert ticks.prune(conn, "sync", table, before=dbworker.now() - dt.timedelta(days=7)) == 0
    assert [i for i, _, _ in tick_rows(db)] == ids[2:]  # the unfinished one and the latest stay
    with db.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(table.c.source_id)).scalars()) == ids[2:]


def test_migrate_names_the_index_a_due_column_lacks(db: Database) -> None:
    c: Coordinator = periodic.build(db.url)
    with Session(db.engine) as s:
        assert c.workers["publish"].missing_due_index(s) is None  # posts.publish_at has one
        assert c.workers["sync"].missing_due_index(s) is None  # no due column
    with db.engine.connect() as conn:
        conn.exec_driver_sql("DROP INDEX ix_posts_publish_at" + (" ON posts" if db.backend == "mariadb" else ""))
        conn.commit()
    with Session(db.engine) as s:
        assert c.workers["publish"].missing_due_index(s) == "CREATE INDEX ix_posts_publish_at ON posts (publish_at)"
