"""Async handlers (docs/async.md): coroutines, many per handler process, each with its own
claim, AsyncSession and fenced commit; the same outcomes and guarantees as sync handlers."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus, Retry, testing
from dbworker.observe import Observer
from dbworker.sql import drivers
from tests.apps import asyncapp
from tests.helpers import kill, pid_alive, wait_until
from tests.integration.conftest import FAST, App

FINISHED = (ExecutionStatus.FINISHED,)


def _coordinator(app: App, **kwargs: Any) -> Coordinator:
    c = asyncapp.build(app.db.url, **{**FAST, **kwargs})
    app.coordinators.append(c)
    return c


def test_outcomes_are_those_of_sync_handlers(app: App) -> None:
    c = _coordinator(app)
    finish, steps, fail, bad, commit, later = app.add("finish", "unfinished:3", "fail", "bad", "commit", "later:0.2")
    c.start()
    app.wait_status([finish, steps, fail, bad, commit, later])
    for i in (finish, later):
        assert app.status(i) is ExecutionStatus.FINISHED and len(app.outputs(i)) == 1
    assert app.status(steps) is ExecutionStatus.FINISHED
    assert sorted(o.run for o in app.outputs(steps)) == [1, 2, 3] and app.item(steps).runs == 3
    errors = {i: (app.state(i) or {})["error"] for i in (fail, bad, commit)}
    assert "asked to fail" in errors[fail]
    assert "must return Finished() or Unfinished()" in errors[bad]
    assert "dbworker owns the commit" in errors[commit]
    for i in (fail, bad, commit):  # rolled back: neither the output nor the runs counter
        assert app.status(i) is ExecutionStatus.FAILED
        assert app.outputs(i) == [] and app.item(i).runs == 0


def test_many_items_run_at_once_as_coroutines_of_one_process(app: App) -> None:
    n = 24
    c = _coordinator(app, concurrency=n)  # processes: 1 by default for an async handler
    ids = app.add(*[f"together:{n}"] * n)
    c.start()
    app.wait_status(ids, FINISHED)
    pids = {o.pid for o in app.outputs()}
    assert len(app.outputs()) == n and len(pids) == 1
    assert c.handler_pids() == list(pids)


def test_processes_share_the_items(app: App) -> None:
    c = _coordinator(app, concurrency=6, processes=2)
    ids = app.add(*["together:6"] * 6)
    c.start()
    app.wait_status(ids, FINISHED)
    assert len({o.pid for o in app.outputs()}) == 2 and len(c.handler_pids()) == 2


def test_a_retry_rule_applies_to_a_coroutine(app: App) -> None:
    c = _coordinator(app, retry=Retry(max_attempts=3, delay=0))
    [i] = app.add("fail")
    c.start()
    app.wait_status([i], (ExecutionStatus.FAILED,))
    assert len(app.started(i)) == 3


def test_timeout_cancels_only_that_coroutine(app: App) -> None:
    c = _coordinator(app, concurrency=4, timeout=2.0)
    slow, *quick = app.add("sleep:60", "sleep:0.2", "sleep:0.2")
    c.start()
    app.wait_status(quick, FINISHED)
    pids = c.handler_pids()
    app.wait_status([slow], (ExecutionStatus.FAILED,), timeout=60)
    state = app.state(slow)
    assert state is not None and "timed out after 2 s" in state["error"]
    assert app.outputs(slow) == [] and app.item(slow).runs == 0
    [after] = app.add("finish")
    app.wait_status([after], FINISHED)
    assert c.handler_pids() == pids  # cancelled in its process, which goes on
    assert {o.pid for o in app.outputs()} == {s.pid for s in app.started()} == set(pids)


class Outcomes(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        self.seen.append(outcome)


def test_cancel_ends_one_coroutine_and_rolls_it_back(app: App) -> None:
    c = _coordinator(app, concurrency=4, lease_seconds=2)
    outcomes = Outcomes()
    c.add_observer(outcomes)
    cancelled, neighbour = app.add("dbwait", "dbwait")
    c.start()
    wait_until(lambda: len(app.started()) == 2, what="both handlers to start")
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, cancelled) is True
        s.commit()
    # Ended at the pod's next lease renewal, while its neighbour still waits.
    wait_until(lambda: "lost" in outcomes.seen, timeout=30, what="the cancelled coroutine to end")
    assert app.status(neighbour) is ExecutionStatus.WORKING
    app.update_item(cancelled, release=True)
    app.update_item(neighbour, release=True)
    app.wait_status([neighbour], FINISHED)
    state = app.state(cancelled)
    assert state is not None and state["error"] == "cancelled" and app.outputs(cancelled) == []
    assert app.item(cancelled).runs == 0
    assert len({s.pid for s in app.started()}) == 1 == len({o.pid for o in app.outputs()})


def test_sigkill_of_the_process_retries_only_the_items_it_held(app: App) -> None:
    c = _coordinator(app, concurrency=4, retry=Retry(max_attempts=3, delay=0))
    killer, neighbour = app.add("killonce", "sleep:0.5")
    c.start()
    app.wait_status([killer, neighbour], FINISHED, timeout=90)
    assert len(app.started(killer)) == 2  # killed once, then finished
    assert len(app.outputs(killer)) == 1 and len(app.outputs(neighbour)) == 1
    assert len({s.pid for s in app.started()}) >= 2  # the process was replaced


def test_a_killed_process_fails_its_items_without_retry(app: App) -> None:
    c = _coordinator(app, concurrency=4)
    [i] = app.add("dbwait")
    c.start()
    wait_until(lambda: app.started(i), what="the handler to start")
    [pid] = c.handler_pids()
    kill(pid)
    app.wait_status([i], (ExecutionStatus.FAILED,))
    state = app.state(i)
    assert state is not None and "handler process died" in state["error"] and "SIGKILL" in state["error"]
    [later] = app.add("finish")
    app.wait_status([later], FINISHED)  # a new process took over


class Health(Observer):
    def __init__(self) -> None:
        self.reports: list[tuple[int, float, int]] = []

    def loop_health(self, worker: str, *, process: int, lag_seconds: float, in_flight: int) -> None:
        self.reports.append((process, lag_seconds, in_flight))


def test_a_blocked_loop_is_reported_and_its_process_replaced(app: App, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dbworker")
    c = _coordinator(app, concurrency=4, timeout=2)
    health = Health()
    c.add_observer(health)
    blocker, neighbour = app.add("block:20", "sleep:1")
    c.start()
    wait_until(lambda: app.started(blocker), what="the blocking handler to start")
    [pid] = c.handler_pids()
    wait_until(lambda: "blocked the event loop" in caplog.text, timeout=30, what="the blocked-loop warning")
    assert "tests.apps.asyncapp.handle" in caplog.text and f"item {blocker!r}" in caplog.text
    wait_until(lambda: any(lag >= 0.5 and n == 2 for _, lag, n in health.reports), what="the lag in a health report")
    app.wait_status([blocker], (ExecutionStatus.FAILED,), timeout=60)
    assert "timed out" in (app.state(blocker) or {})["error"]
    wait_until(lambda: not pid_alive(pid), what="the blocked process to end")
    # Its neighbour, stuck behind it, was given back (not failed) and ran in a new process.
    app.wait_status([neighbour], FINISHED, timeout=60)
    assert {o.pid for o in app.outputs(neighbour)} != {pid}


def test_stop_drains_and_a_deadline_gives_claims_back(app: App) -> None:
    c = _coordinator(app, concurrency=8, lease_seconds=300)
    quick = app.add(*["sleep:0.3"] * 3)
    c.start()
    wait_until(lambda: len(app.started()) == 3, what="the handlers to start")
    c.stop()
    assert all(app.status(i) is ExecutionStatus.FINISHED for i in quick)
    c2 = _coordinator(app, concurrency=8, lease_seconds=300)
    waiting = app.add("dbwait", "dbwait")
    c2.start()
    wait_until(lambda: len(app.started()) == 5, what="the waiting handlers to start")
    c2.stop(timeout=1)
    for i in waiting:
        state = app.state(i)
        assert state is not None and state["execution_status"] is ExecutionStatus.UNFINISHED
        assert state["claim_token"] is None and app.outputs(i) == []


def test_processes_is_checked(app: App) -> None:
    from tests.apps import basic

    c = basic.build(app.db.url, concurrency=3, **FAST)
    app.coordinators.append(c)
    with pytest.raises(ValueError, match=r"processes of worker 'sync2' must equal its concurrency \(3\)"):
        c.transactional_worker(name="sync2", source=basic.Item, concurrency=3, processes=1)(basic.handle)
    with pytest.raises(ValueError, match=r"processes of worker 'async2' must be at most its concurrency"):
        c.transactional_worker(name="async2", source=basic.Item, concurrency=2, processes=3)(asyncapp.handle)
    with pytest.raises(ValueError, match=r"processes of worker 'async3' must be an integer >= 1"):
        c.transactional_worker(name="async3", source=basic.Item, concurrency=2, processes=0)(asyncapp.handle)


def _server_connections(app: App) -> int:
    """Connections to this test's database, ours included (one)."""
    with app.db.engine.connect() as conn:
        if app.db.backend == "postgresql":
            query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        else:
            query = "SELECT count(*) FROM information_schema.processlist WHERE db = database()"
        return int(conn.exec_driver_sql(query).scalar_one())


def test_items_waiting_on_io_hold_no_connection(app: App) -> None:
    if app.db.backend == "sqlite":
        pytest.skip("SQLite has no server connections to count")
    n = 60
    c = _coordinator(app, concurrency=n)
    ids = app.add(*["sleep:4"] * n)
    c.start()
    wait_until(lambda: len(app.started()) == n, what="every item to be running")
    # The handler process holds at most drivers.ASYNC_POOL_MAX (4); the coordinator its
    # engine's pool (at most 15) and a listener: far fewer than one per item in flight.
    held = _server_connections(app)
    assert held <= drivers.ASYNC_POOL_MAX + 15 + 2 < n, held
    app.wait_status(ids, FINISHED)


def test_drain_runs_async_handlers_in_the_calling_process(app: App) -> None:
    c = _coordinator(app, retry=Retry(max_attempts=2, delay=0))
    finish, steps, fail = app.add("finish", "unfinished:2", "fail")
    assert testing.drain(c) == {"items": 5}  # 1 + 2 steps + 2 attempts
    assert app.status(finish) is ExecutionStatus.FINISHED and app.status(steps) is ExecutionStatus.FINISHED
    assert app.status(fail) is ExecutionStatus.FAILED and app.outputs(fail) == []
    assert {o.pid for o in app.outputs()} == {os.getpid()}  # no handler process
    assert c.handler_pids() == [] and testing.drain(c) == {"items": 0}


def test_drain_of_async_handlers_refuses_an_in_memory_database() -> None:
    c = asyncapp.build("sqlite://")
    with pytest.raises(ValueError, match="cannot see an in-memory SQLite database; use a file"):
        testing.drain(c)


def test_inspect_and_the_console_show_an_async_workers_processes(app: App) -> None:
    from dbworker.console import queries
    from dbworker.pod import admin

    c = _coordinator(app, concurrency=200, processes=2)
    [entry] = admin.inspect_report(c, ["items"], failed=False)
    assert (entry["concurrency"], entry["processes"], entry["async"]) == (200, 2, True)
    assert admin.render_async([entry]) == "  items: 200 coroutines in 2 handler processes per pod"
    [summary] = queries.overview(c)
    assert (summary.concurrency, summary.processes, summary.asynchronous) == (200, 2, True)
    assert summary.as_json()["processes"] == 2


def _progress(app: App, item_id: int) -> dict[str, Any] | None:
    state = app.state(item_id)
    assert state is not None
    return state["progress"]


def test_each_coroutine_reports_its_own_items_progress(app: App) -> None:
    c = _coordinator(app, concurrency=4)
    many, few, failing = app.add("progress:200", "progress:4", "progressfail")
    c.start()
    # Both run in one process at once; each one's newest report lands on its own item.
    wait_until(lambda: all((_progress(app, i) or {}).get("fraction") == 1.0 for i in (many, few)),
               timeout=60, what="the last progress report of both items")  # fmt: skip
    assert len({s.pid for s in app.started()}) == 1
    assert (_progress(app, many) or {})["note"] == f"item {many} step 200"
    assert (_progress(app, few) or {})["note"] == f"item {few} step 4"
    assert app.status(many) is app.status(few) is ExecutionStatus.WORKING  # seen before the outcome
    # A report made just before raising is written before the failure is recorded, and kept.
    app.wait_status([failing])
    assert c.workers["items"].progress(app.db.engine) == (2, 1.0)  # the working items only
    assert app.status(failing) is ExecutionStatus.FAILED and app.outputs(failing) == []
    assert (_progress(app, failing) or {})["fraction"] == 0.25
    for i in (many, few):
        app.update_item(i, release=True)
    app.wait_status([many, few], FINISHED)


def test_progress_after_the_claim_was_lost_is_ignored(app: App) -> None:
    c = _coordinator(app, concurrency=4)
    outcomes = Outcomes()
    c.add_observer(outcomes)
    [i] = app.add("progresslate")
    c.start()
    wait_until(lambda: _progress(app, i) is not None, timeout=60, what="the first report")
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, i) is True
        s.commit()
    app.update_item(i, release=True)  # the coroutine reports 0.9 on a claim no longer its own
    wait_until(lambda: "lost" in outcomes.seen, timeout=60, what="the lost claim")
    assert (_progress(app, i) or {})["fraction"] == 0.1 and app.outputs(i) == []


def test_each_coroutine_keeps_its_own_log_records(app: App) -> None:
    c = _coordinator(app, concurrency=4)
    a, b, failing = app.add("chat:2", "chat:2", "logfail")
    c.start()
    app.wait_status([a, b, failing])
    assert len({s.pid for s in app.started()}) == 1  # interleaved on one event loop
    for i in (a, b):
        state = app.state(i)
        assert state is not None and state["execution_status"] is ExecutionStatus.FINISHED
        [attempt] = state["history"]
        assert [r["message"] for r in attempt["logs"]] == [f"item {i} line {k}" for k in (1, 2, 3)]
        assert {r["logger"] for r in attempt["logs"]} == {"tests.items"}
    state = app.state(failing)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    [attempt] = state["history"]
    assert attempt["outcome"] == "failed" and [r["message"] for r in attempt["logs"]] == [f"item {failing} logged"]


def test_history_logs_off_keeps_no_records_of_coroutines(app: App) -> None:
    c = _coordinator(app, history_logs=False)
    [i] = app.add("chat:1")
    c.start()
    app.wait_status([i], FINISHED)
    state = app.state(i)
    assert state is not None and [a["logs"] for a in state["history"]] == [[]]
