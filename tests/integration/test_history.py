"""Attempt history and progress (issue 30): every attempt recorded with its outcome, kept
bounded, deleted with its source row; progress reported by a running handler."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import socket
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from dbworker import Coordinator, ExecutionStatus, Retry, report_progress, settings, testing
from dbworker.engine.context import Context
from dbworker.engine.pruner import Pruner
from dbworker.observe import Observer
from dbworker.pod import cli
from dbworker.sql import history, progress, tables
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App

KEYS = {"started_at", "ended_at", "outcome", "error", "traceback", "claimed_by", "logs", "trace_id", "span_id"}


def _history(app: App, item_id: int) -> list[dict[str, Any]]:
    state = app.state(item_id)
    assert state is not None
    return list(state["history"])


def test_a_finished_item_has_one_attempt_with_its_pod_and_times(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("finish")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    [attempt] = _history(app, i)
    assert set(attempt) == KEYS
    assert attempt["outcome"] == "finished" and attempt["error"] is None
    assert attempt["trace_id"] is None and attempt["span_id"] is None  # tracing off here
    host, _, pid = attempt["claimed_by"].rpartition(":")
    assert host == socket.gethostname() and int(pid) > 0
    assert isinstance(attempt["started_at"], dt.datetime) and isinstance(attempt["ended_at"], dt.datetime)
    assert attempt["started_at"] <= attempt["ended_at"] + dt.timedelta(seconds=5)  # two clocks, one host
    state = app.state(i)
    assert state is not None and state["attempts"] == 1 and state["progress"] is None


def test_unfinished_steps_and_retried_failures_are_attempts_oldest_first(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=5, delay=0.01, backoff=1.0))
    [steps, flaky] = app.add("unfinished:3", "flaky:3")
    c.start()
    app.wait_status([steps, flaky], (ExecutionStatus.FINISHED,))
    assert [a["outcome"] for a in _history(app, steps)] == ["unfinished", "unfinished", "finished"]
    attempts = _history(app, flaky)
    assert [a["outcome"] for a in attempts] == ["retried", "retried", "finished"]
    assert all("is flaky" in a["error"] and "OSError" in a["traceback"] for a in attempts[:2])
    ended = [a["ended_at"] for a in attempts]
    assert ended == sorted(ended)


def test_a_failure_keeps_its_error_and_traceback_in_the_history(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("fail")
    c.start()
    app.wait_status([i])
    [attempt] = _history(app, i)
    assert attempt["outcome"] == "failed" and "asked to fail" in attempt["error"]
    assert "RuntimeError" in attempt["traceback"]


def test_a_crash_and_a_timeout_are_recorded_by_the_parent(app: App) -> None:
    c = app.coordinator(timeout=1.0)
    [crash, hang] = app.add("kill", "hang")
    c.start()
    app.wait_status([crash, hang])
    [crashed] = _history(app, crash)
    assert crashed["outcome"] == "crashed" and "died" in crashed["error"]
    assert crashed["started_at"] is not None and crashed["claimed_by"]
    [timed_out] = _history(app, hang)
    assert timed_out["outcome"] == "timed_out" and "timed out" in timed_out["error"]
    assert timed_out["ended_at"] - timed_out["started_at"] >= dt.timedelta(seconds=0.5)


def test_deleting_the_source_row_deletes_its_history(app: App) -> None:
    c = app.coordinator()
    [gone, kept] = app.add("unfinished:2", "finish")
    c.start()
    app.wait_status([gone, kept], (ExecutionStatus.FINISHED,))
    table = history.history_table(c.workers["items"].table)
    with Session(app.db.engine) as s:
        s.execute(sa.delete(basic.Output))
        work = c.workers["items"].table  # (main's work tables cascade too)
        s.execute(sa.delete(work).where(work.c.source_id == gone))
        s.execute(sa.delete(basic.Item).where(basic.Item.id == gone))
        s.commit()
    with Session(app.db.engine) as s:
        left = s.execute(sa.select(table.c.source_id)).scalars().all()
    assert left == [kept]


def test_prune_keeps_the_newest_attempts_per_item_and_drops_old_ones(app: App) -> None:
    c = app.coordinator()
    [many, few] = app.add("unfinished:6", "unfinished:2")
    c.start()
    app.wait_status([many, few], (ExecutionStatus.FINISHED,))
    c.stop()
    table = history.history_table(c.workers["items"].table)
    long_ago = dt.datetime(2000, 1, 1)
    with app.db.engine.connect() as conn:
        assert history.prune(conn, table, keep=3, days=30, since=long_ago, batch=2) == 2  # batch-bounded
        assert history.prune(conn, table, keep=3, days=30, since=long_ago, batch=500) == 1
        assert history.prune(conn, table, keep=3, days=30, since=long_ago, batch=500) == 0
    assert [a["outcome"] for a in _history(app, many)] == ["unfinished", "unfinished", "finished"]
    assert len(_history(app, few)) == 2
    with app.db.engine.begin() as conn:  # one attempt of `few` ended 40 days ago
        oldest = conn.execute(sa.select(sa.func.min(table.c.id)).where(table.c.source_id == few)).scalar()
        conn.execute(sa.update(table).where(table.c.id == oldest).values(ended_at=dt.datetime(2001, 1, 1)))
    with app.db.engine.connect() as conn:
        assert history.prune(conn, table, keep=3, days=30, since=None, batch=500) == 1
    assert [a["outcome"] for a in _history(app, few)] == ["finished"]


def test_the_loop_prunes_with_the_coordinator_settings(app: App) -> None:
    c = app.coordinator(history_attempts=2, history_days=7)
    assert (c.history_attempts, c.history_days) == (2, 7.0)
    [i] = app.add("unfinished:5")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    timing = settings.settings(c.lease_seconds, c.poll_seconds, c.max_poll_seconds)
    ctx = Context(
        worker=next(w for w in c.registrations() if w.name == "items"), engine=app.db.engine,
        settings=dataclasses.replace(timing, history_attempts=c.history_attempts, history_days=c.history_days),
        observer=Observer(),
    )  # fmt: skip
    assert Pruner(ctx).run() == 3  # one pass now, as each loop makes about once a minute
    assert [a["outcome"] for a in _history(app, i)] == ["unfinished", "finished"]


def test_history_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="history_attempts"):
        basic.build("sqlite://", app_tables=False, work_tables=False, history_attempts=-1)
    with pytest.raises(ValueError, match="history_days"):
        basic.build("sqlite://", app_tables=False, work_tables=False, history_days=-1)


def test_migrate_creates_the_history_table_of_an_existing_database(app: App) -> None:
    c = app.coordinator()
    work = c.workers["items"].table
    table = history.history_table(work)
    with app.db.engine.begin() as conn:
        table.drop(conn)
        for name in progress.COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE {work.name} DROP COLUMN {name}")
    with pytest.raises(RuntimeError, match="need an upgrade"):
        c.start()
    changes = c.create_worker_tables()
    assert f"created {table.name}" in changes and f"added column {work.name}.progress_at" in changes
    assert not [x for x in c.create_worker_tables() if "items" in x]  # idempotent
    [i] = app.add("fail")
    c.start()
    app.wait_status([i])
    assert [a["outcome"] for a in _history(app, i)] == ["failed"]
    with Session(app.db.engine) as s:  # its delete cascade works too (the trigger on SQLite)
        s.execute(sa.delete(work).where(work.c.source_id == i))
        s.execute(sa.delete(basic.Item).where(basic.Item.id == i))
        s.commit()
        assert s.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0


def test_progress_is_seen_while_the_handler_runs_and_survives_a_rollback(app: App) -> None:
    c = app.coordinator()
    [running, failing] = app.add("progress", "progressfail")
    c.start()

    def reported() -> bool:
        state = app.state(running)
        return state is not None and state["progress"] is not None

    wait_until(reported, timeout=60, what="the progress report")
    app.wait_status([failing])
    state = app.state(running)
    assert state is not None and state["execution_status"] is ExecutionStatus.WORKING
    assert state["progress"]["fraction"] == 0.5 and state["progress"]["note"] == "half way"
    assert isinstance(state["progress"]["at"], dt.datetime)
    assert c.workers["items"].progress(app.db.engine) == (1, 0.5)
    app.update_item(running, release=True)
    app.wait_status([running, failing])
    state = app.state(failing)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["progress"]["fraction"] == 0.25 and state["progress"]["note"] == "quarter"
    assert c.workers["items"].progress(app.db.engine) == (0, None)  # none running


def test_progress_of_a_lost_claim_is_ignored(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("progress")
    c.start()
    wait_until(lambda: (s := app.state(i)) is not None and s["progress"] is not None, timeout=60, what="progress")
    table = c.workers["items"].table
    with app.db.engine.connect() as conn:
        assert progress.write(conn, table, i, "not-the-token", fraction=0.9, note="x" * 500) is False
        token = conn.execute(sa.select(table.c.claim_token).where(table.c.source_id == i)).scalar()
        assert progress.write(conn, table, i, token, fraction=0.75, note="x" * 500) is True
    state = app.state(i)
    assert state is not None and state["progress"]["fraction"] == 0.75
    assert len(state["progress"]["note"]) == tables.PROGRESS_NOTE_CHARS
    app.update_item(i, release=True)
    app.wait_status([i])


def test_report_progress_checks_its_arguments_and_where_it_is_called() -> None:
    with pytest.raises(ValueError, match="fraction"):
        report_progress(1.5)
    with pytest.raises(ValueError, match="fraction"):
        report_progress(float("nan"))
    with pytest.raises(ValueError, match="note"):
        report_progress(note=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fraction and note"):
        report_progress()
    with pytest.raises(RuntimeError, match="outside a handler"):
        report_progress(0.5, "ok")


def test_inspect_item_prints_the_history_and_progress(app: App, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0.01, backoff=1.0))
    [i] = app.add("flaky:2")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    c.stop()
    monkeypatch.setattr(basic, "inspected", c, raising=False)
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--worker", "items", "--item", str(i)]) == 0
    out = capsys.readouterr().out
    assert "history (2 attempts kept, oldest first)" in out and "retried" in out and "is flaky" in out
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--worker", "items", "--item", str(i), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [a["outcome"] for a in shown["item"]["history"]] == ["retried", "finished"]
    assert shown["item"]["progress"] is None
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--item", str(i)]) == 2


def test_drain_records_attempts_and_progress_in_the_calling_process(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("progressfail")
    assert testing.drain(c) == {"items": 1}
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["progress"]["fraction"] == 0.25  # its own transaction: kept after the rollback
    assert [a["outcome"] for a in state["history"]] == ["failed"]


def test_drain_on_one_shared_connection_stores_no_progress_and_commits_nothing_early() -> None:
    engine = sa.create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    c = Coordinator(sessionmaker(engine), database_url="sqlite://")
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    basic.create_app_tables(engine)
    c.create_worker_tables()
    [i] = basic.add_items(engine, ["progressfail"])
    assert testing.drain(c) == {"items": 1}
    with Session(engine) as s:
        state = c.workers["items"].state(s, i)
        assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
        assert state["progress"] is None and [a["outcome"] for a in state["history"]] == ["failed"]
        assert s.get(basic.Item, i).runs == 0  # type: ignore[union-attr]  # the handler's write rolled back
