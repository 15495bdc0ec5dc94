"""`dbworker pause`, `resume` and `console` as a user runs them: output, exit codes, refusals."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.acceptance.conftest import AppDb
from tests.acceptance.support import APP, Worker, run_command
from tests.console.support import SECRET, TOKEN, ConsoleProcess, request
from tests.helpers import wait_until


def test_pause_and_resume_show_in_inspect_and_in_a_running_pods_gauge(appdb_all: AppDb, tmp_path: Path) -> None:
    appdb_all.create_worker_tables()
    worker = Worker(appdb_all.url, tmp_path)
    try:
        worker.wait_ready()
        worker.wait_value("dbworker_paused", 0, worker="main")
        r = run_command(["pause", APP, "--worker", "main"], database_url=appdb_all.url)
        assert r.returncode == 0, r.stderr
        assert "worker 'main' paused" in r.stdout
        again = run_command(["pause", APP, "--worker", "main"], database_url=appdb_all.url)
        assert "was paused already" in again.stdout
        worker.wait_value("dbworker_paused", 1, worker="main")
        assert worker.value("dbworker_paused", worker="other") == 0
        report = json.loads(run_command(["inspect", APP, "--json"], database_url=appdb_all.url).stdout)
        assert {w["worker"]: w["paused"] for w in report["workers"]} == {"main": True, "other": False}
        text = run_command(["inspect", APP, "--worker", "main"], database_url=appdb_all.url).stdout.splitlines()
        assert text[0].split()[-1] == "PAUSED" and text[1].split()[-1] == "yes"
        r = run_command(["resume", APP, "--worker", "main"], database_url=appdb_all.url)
        assert r.returncode == 0 and "worker 'main' resumed" in r.stdout
        worker.wait_value("dbworker_paused", 0, worker="main")
    finally:
        worker.close()


def test_pause_needs_one_known_worker(sqlite_db: AppDb) -> None:
    sqlite_db.create_worker_tables()
    r = run_command(["pause", APP], database_url=sqlite_db.url)
    assert r.returncode == 2 and r.stderr == "dbworker: pause needs exactly one --worker NAME (the worker to pause)\n"
    r = run_command(["resume", APP, "--worker", "nope"], database_url=sqlite_db.url)
    assert r.returncode == 2 and "unknown worker 'nope'" in r.stderr


def test_console_refuses_to_listen_beyond_loopback_without_a_token(sqlite_db: AppDb) -> None:
    r = run_command(["console", APP, "--host", "0.0.0.0"], database_url=sqlite_db.url)
    assert r.returncode == 2
    assert r.stderr == (
        "dbworker: the console needs a sign-in token to listen on '0.0.0.0' (--host): give --token or "
        "DBWORKER_CONSOLE_TOKEN, or listen on a loopback address such as 127.0.0.1\n"
    )


def test_console_rejects_a_weak_token_without_echoing_it(sqlite_db: AppDb) -> None:
    r = run_command(["console", APP], database_url=sqlite_db.url, env={"DBWORKER_CONSOLE_TOKEN": "short-pw"})
    assert r.returncode == 2
    assert "DBWORKER_CONSOLE_TOKEN: token 1 is not usable" in r.stderr and "short-pw" not in r.stderr
    r = run_command(["console", APP, "--port", "70000", "--token", TOKEN], database_url=sqlite_db.url)
    assert r.returncode == 2 and r.stderr == "dbworker: --port 70000 is not a port; use 1-65535\n"


def test_console_port_in_use_is_exit_2(sqlite_db: AppDb, tmp_path: Path) -> None:
    sqlite_db.create_worker_tables()
    first = ConsoleProcess(sqlite_db.url, tmp_path)
    try:
        r = run_command(["console", APP, "--port", str(first.port), "--token", TOKEN], database_url=sqlite_db.url)
        assert r.returncode == 2 and f"--port {first.port}: the port is in use" in r.stderr
    finally:
        first.close()


def test_console_logs_actions_with_who_never_its_token_and_stops_on_sigterm(sqlite_db: AppDb, tmp_path: Path) -> None:
    sqlite_db.create_worker_tables()
    console = ConsoleProcess(sqlite_db.url, tmp_path)
    try:
        bearer = {"Authorization": f"Bearer {SECRET}"}
        status, body = console.get("/api/workers", headers=bearer)
        assert status == 200 and SECRET not in body
        assert console.get("/api/workers", headers={"Authorization": "Bearer " + SECRET[:-1]})[0] == 401
        status, _ = request(console.url + "/api/workers/main/pause", method="POST", headers=bearer)
        assert status == 200
        wait_until(lambda: "console: alice: pause worker 'main': paused" in console.log_text(),
                   what=f"the action's log line (log: {console.log_text()})")  # fmt: skip
        console.process.send_signal(signal.SIGTERM)
        assert console.process.wait(30) == 0
    finally:
        console.close()
    log = console.log_text()
    assert "dbworker console on http://127.0.0.1" in log and "1 token(s)" in log
    assert SECRET not in log


def test_console_names_missing_tables_and_the_fix(sqlite_db: AppDb) -> None:
    r = run_command(["console", APP, "--token", TOKEN], database_url=sqlite_db.url)
    assert r.returncode == 2
    assert r.stderr == (
        "dbworker: table(s) main_work, other_work, main_history, other_history, dbworker_paused do not exist; "
        f"run `dbworker migrate {APP}` first\n"
    )
