"""`dbworker run` as a real process: metrics that move, and what SIGTERM/SIGINT do to handlers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable

import pytest

from tests.acceptance.conftest import AppDb
from tests.acceptance.support import Worker, all_gone, json_lines
from tests.helpers import children_of, wait_until

StartWorker = Callable[..., Worker]
FAST = ("--backlog-seconds", "0.2", "--create-tables")


def test_metrics_move_as_items_finish_fail_and_crash(
    appdb_all: AppDb, start_worker: StartWorker
) -> None:
    db = appdb_all
    db.add({"id": 1}, {"id": 2}, {"id": 3, "action": "fail"}, {"id": 4, "action": "exit"})
    w = start_worker(
        db, *FAST, "--worker", "main", "--concurrency", "main=3", "--log-format", "json"
    )
    w.wait_ready()
    w.wait_value("dbworker_executions_total", 2, worker="main", outcome="finished")
    w.wait_value("dbworker_executions_total", 1, worker="main", outcome="failed")
    w.wait_value("dbworker_executions_total", 1, worker="main", outcome="crashed")
    assert w.value("dbworker_claims_total", worker="main") == 4
    # Nothing died before these claims: a take-over here would mean a first claim went astray.
    assert w.value("dbworker_leases_taken_over_total", worker="main") == 0
    assert w.value("dbworker_handler_slots", worker="main") == 3
    assert (
        w.value("dbworker_handler_duration_seconds_count", worker="main", outcome="finished") == 2
    )
    assert w.value("dbworker_handler_duration_seconds_count", worker="main", outcome="failed") == 1
    assert w.value("dbworker_executions_total", worker="main", outcome="aborted") == 0
    assert w.value("dbworker_db_errors_total", worker="main", operation="claim") == 0
    assert w.value("dbworker_draining") == 0
    dialect = "mariadb" if db.backend == "mariadb" else db.backend
    assert w.value("dbworker_build_info", version="0.1.0", dialect=dialect) == 1
    # Only the selected worker runs and has series.
    assert w.value("dbworker_claims_total", worker="other") is None
    beat = w.value("dbworker_loop_heartbeat_timestamp_seconds", worker="main")
    assert beat is not None and beat > 0

    # New work moves the counters again; the backlog sampler sees an item that cannot run yet.
    db.add({"id": 5, "action": "unfinished"})
    w.wait_value("dbworker_executions_total", 1, worker="main", outcome="unfinished")
    w.wait_value("dbworker_executions_total", 3, worker="main", outcome="finished")
    w.wait_value("dbworker_handlers_active", 0, worker="main")
    w.wait_value("dbworker_backlog", 0, worker="main")
    assert db.task(5).result is not None and db.task(1).result is not None
    assert w.get("/healthz") == (200, "ok\n")

    w.signal(signal.SIGTERM)
    assert w.wait_exit() == 0
    logs = json_lines(w.log_text())
    assert logs and all({"time", "level", "logger", "message"} <= set(entry) for entry in logs)
    assert any("failed on purpose" in str(entry["message"]) for entry in logs)
    # What handlers log with the application's own loggers reaches the pod's log, tagged.
    handled = {"logger": "taskapp", "level": "INFO", "message": "task 1 handled", "worker": "main"}
    assert any(handled.items() <= entry.items() for entry in logs), w.log_tail()


@pytest.mark.slow
def test_sigterm_lets_running_handlers_finish(appdb: AppDb, start_worker: StartWorker) -> None:
    _stop_while_a_handler_runs(appdb, start_worker, lambda w: w.signal(signal.SIGTERM))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill-group"])
def test_signals_to_the_whole_process_group_do_not_end_handlers(
    sqlite_db: AppDb, start_worker: StartWorker, sig: signal.Signals
) -> None:
    # A terminal's Ctrl-C (or `kill -TERM -PGID`) reaches every process in the group,
    # handlers too: they must ignore it and let the coordinator decide.
    _stop_while_a_handler_runs(sqlite_db, start_worker, lambda w: w.signal_group(sig))


def _stop_while_a_handler_runs(
    appdb: AppDb, start_worker: StartWorker, stop: Callable[[Worker], None]
) -> None:
    appdb.add({"id": 1, "action": "sleep", "seconds": 5.0})
    w = start_worker(appdb, *FAST, "--worker", "main", "--drain-seconds", "60")
    w.wait_ready()
    w.wait_value("dbworker_handlers_active", 1, worker="main")
    handlers = w.handler_pids()
    stop(w)
    wait_until(lambda: w.get("/readyz") == (503, "draining\n"), timeout=30, what="/readyz draining")
    assert w.value("dbworker_draining") == 1
    assert w.get("/healthz")[0] == 200  # draining is not a reason to restart
    assert w.wait_exit() == 0
    task = appdb.task(1)
    assert task.result is not None, w.log_tail()
    assert str(appdb.state("main", 1)["execution_status"]) == "finished"
    wait_until(lambda: all_gone(handlers), timeout=10, what="handler processes gone")


def test_drain_deadline_ends_handlers_and_releases_their_claims(
    appdb: AppDb, start_worker: StartWorker
) -> None:
    appdb.add(
        {"id": 1, "action": "sleep", "seconds": 600.0},
        {"id": 2, "action": "sleep", "seconds": 600.0},
    )
    w = start_worker(appdb, *FAST, "--worker", "main", "--drain-seconds", "1")
    w.wait_ready()
    w.wait_value("dbworker_handlers_active", 2, worker="main")
    handlers = w.handler_pids()
    w.signal(signal.SIGTERM)
    assert w.wait_exit(timeout=60) == 0
    wait_until(lambda: all_gone(handlers), timeout=10, what="handler processes ended")
    for task_id in (1, 2):
        assert appdb.task(task_id).result is None
        _assert_released(appdb, task_id)


def test_second_signal_ends_and_releases_everything_at_once(
    appdb: AppDb, start_worker: StartWorker
) -> None:
    appdb.add({"id": 1, "action": "sleep", "seconds": 600.0})
    # A short lease so renewals (every third of it) show in the metrics while we wait.
    w = start_worker(
        appdb, *FAST, "--worker", "main", "--drain-seconds", "600", "--lease-seconds", "1.5"
    )
    w.wait_ready()
    w.wait_value("dbworker_handlers_active", 1, worker="main")
    handlers = w.handler_pids()
    wait_until(
        lambda: (
            (w.value("dbworker_lease_renewals_total", worker="main", result="renewed") or 0) >= 2
        ),
        timeout=30,
        what="lease renewals of the running handler",
    )
    w.signal(signal.SIGTERM)
    w.wait_value("dbworker_draining", 1)
    w.wait_value("dbworker_handlers_active", 1, worker="main")  # still running: drain is long
    w.signal(signal.SIGINT)
    assert w.wait_exit(timeout=60) == 0
    wait_until(lambda: all_gone(handlers), timeout=10, what="handler processes ended")
    _assert_released(appdb, 1)
    assert "again" in w.log_text()


def _assert_released(appdb: AppDb, task_id: int) -> None:
    """The item is not finished and no live lease blocks another process from claiming it."""
    import datetime as dt

    state = appdb.state("main", task_id)
    assert state is not None
    assert str(state["execution_status"]) != "finished"
    expires = state["lease_expires_at"]
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert expires is None or expires <= now, state


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs `unshare --pid` (root or user namespaces)")
def test_as_pid_1_it_drains_on_sigterm_and_reaps_its_children(
    sqlite_db: AppDb, start_worker: StartWorker
) -> None:
    # A container runs the command as PID 1 with no shell or init in front of it.
    appdb = sqlite_db
    appdb.add({"id": 1, "action": "exit"}, {"id": 2, "action": "sleep", "seconds": 5.0})
    prefix = ["unshare", "--pid", "--fork", "--mount-proc"]
    w = start_worker(appdb, *FAST, "--worker", "main", "--drain-seconds", "60", prefix=prefix)
    w.wait_ready()
    w.wait_value("dbworker_executions_total", 1, worker="main", outcome="crashed")
    w.wait_value("dbworker_handlers_active", 1, worker="main")
    (pid1,) = wait_until(lambda: children_of(w.pid), timeout=10, what="the namespace's PID 1")
    with open(f"/proc/{pid1}/status") as f:
        nspid = next(line for line in f if line.startswith("NSpid:"))
    assert nspid.split()[-1] == "1", nspid  # its pid inside the namespace
    zombies = subprocess.run(
        ["ps", "-o", "stat=", "--ppid", str(pid1)], capture_output=True, text=True
    )
    assert "Z" not in zombies.stdout
    os.kill(pid1, signal.SIGTERM)
    assert w.wait_exit() == 0  # unshare --fork exits with its child's status
    assert appdb.task(2).result is not None


def test_metrics_port_0_runs_without_http_and_env_settings_apply(
    sqlite_db: AppDb, start_worker: StartWorker
) -> None:
    sqlite_db.add({"id": 1})
    env = {"DBWORKER_METRICS_PORT": "9", "DBWORKER_WORKER": "main", "DBWORKER_CREATE_TABLES": "yes"}
    # The flag (0: no HTTP server) wins over the variable (9).
    w = start_worker(sqlite_db, "--metrics-port", "0", env=env)
    wait_until(lambda: sqlite_db.task(1).result is not None, timeout=60, what="item 1 finished")
    assert "running workers main (sqlite)" in w.log_text()
    assert "serving /metrics" not in w.log_text()
    w.signal(signal.SIGTERM)
    assert w.wait_exit() == 0
