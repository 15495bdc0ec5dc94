"""`dbworker migrate`, `inspect`, `retry` and bad input, each as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.acceptance.conftest import AppDb
from tests.acceptance.support import APP, ROOT, _env, dbworker_command, run_command


def test_migrate_from_several_processes_at_once(appdb_all: AppDb) -> None:
    procs = [
        subprocess.Popen(
            dbworker_command("migrate", APP),
            cwd=ROOT,
            env=_env(appdb_all.url, None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(4)
    ]
    results = [(p.wait(120), *p.communicate()) for p in procs]
    for code, out, err in results:
        assert code == 0, err
        assert "work tables up to date: main_work, other_work" in out
    names = set(sa.inspect(appdb_all.db.engine).get_table_names())
    assert {"main_work", "other_work"} <= names
    again = run_command(["migrate", APP], database_url=appdb_all.url)
    assert again.returncode == 0, again.stderr


def _seed_statuses(appdb: AppDb) -> None:
    """Items 1-3 with recorded outcomes (storage layout from SPEC), 4-5 never claimed."""
    appdb.add(*({"id": i} for i in range(1, 6)), {"id": 6, "kind": "other"})
    appdb.create_worker_tables()
    table = appdb.coordinator.workers["main"].table
    with appdb.db.engine.begin() as conn:
        conn.execute(
            sa.insert(table),
            [
                {
                    "source_id": 1,
                    "execution_status": "failed",
                    "error": "Traceback...\nRuntimeError: boom one",
                },
                {"source_id": 2, "execution_status": "finished", "error": None},
                {"source_id": 3, "execution_status": "failed", "error": "RuntimeError: boom three"},
            ],
        )


def test_inspect_json_and_text(appdb: AppDb) -> None:
    _seed_statuses(appdb)
    r = run_command(["inspect", APP, "--json", "--failed"], database_url=appdb.url)
    assert r.returncode == 0, r.stderr
    report = {w["worker"]: w for w in json.loads(r.stdout)["workers"]}
    assert report["main"]["counts"] == {"working": 0, "unfinished": 0, "finished": 1, "failed": 2}
    assert report["main"]["claimable"] == 2 and report["main"]["claimable_capped"] is False
    assert sorted(int(f["id"]) for f in report["main"]["failed"]) == [1, 3]
    assert any("boom one" in f["error"] for f in report["main"]["failed"])
    assert report["other"]["claimable"] == 1 and report["other"]["failed"] == []

    text = run_command(["inspect", APP, "--failed", "--worker", "main"], database_url=appdb.url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == [
        "WORKER",
        "WORKING",
        "UNFINISHED",
        "FINISHED",
        "FAILED",
        "CLAIMABLE",
        "ON-LIMIT",
        "PAUSED",
    ]
    assert lines[1].split() == ["main", "0", "0", "1", "2", "2", "-"]
    assert "  3: RuntimeError: boom three" in lines
    assert report["main"]["paused"] is False


def test_retry_ids_and_all_failed(appdb: AppDb) -> None:
    _seed_statuses(appdb)
    r = run_command(["retry", APP, "--worker", "main", "1", "2"], database_url=appdb.url)
    assert r.returncode == 0, r.stderr
    assert "reset 1 failed item(s) of worker 'main'" in r.stdout
    assert "left alone (not failed): 2" in r.stderr
    state = appdb.state("main", 1)
    assert str(state["execution_status"]) == "unfinished" and state["error"] is None

    r = run_command(["retry", APP, "--worker", "main", "--all-failed"], database_url=appdb.url)
    assert r.returncode == 0 and "reset 1 failed item(s)" in r.stdout, r.stderr
    assert str(appdb.state("main", 3)["execution_status"]) == "unfinished"

    bad = run_command(["retry", APP, "--worker", "main", "x"], database_url=appdb.url)
    assert bad.returncode == 2
    assert bad.stderr == "dbworker: item ID 'x' is not an integer (the primary key of Task)\n"


def test_cancel_ids(appdb: AppDb) -> None:
    _seed_statuses(appdb)
    r = run_command(["cancel", APP, "--worker", "main", "4", "2"], database_url=appdb.url)
    assert r.returncode == 0, r.stderr
    assert "cancelled 1 item(s) of worker 'main'" in r.stdout
    assert "left alone (finished or failed already): 2" in r.stderr
    state = appdb.state("main", 4)  # never claimed: it gets a record and will not run
    assert str(state["execution_status"]) == "failed" and state["error"] == "cancelled"
    bad = run_command(["cancel", APP, "--worker", "main"], database_url=appdb.url)
    assert bad.returncode == 2 and "nothing to cancel: give the item IDs" in bad.stderr


@pytest.mark.parametrize(
    ("args", "env", "reason", "expected"),
    [
        (
            ["run", APP, "--worker", "nope"],
            {},
            "UnknownWorker",
            "dbworker: unknown worker 'nope' (--worker); known workers: main, other",
        ),
        (
            ["run", APP],
            {"DBWORKER_WORKER": "main,x"},
            "UnknownWorker",
            "dbworker: unknown worker 'x' (DBWORKER_WORKER); known workers: main, other",
        ),
        (
            ["run", "tests.acceptance.nosuchapp:coordinator"],
            {},
            "BadInput",
            "dbworker: cannot import module 'tests.acceptance.nosuchapp'",
        ),
        (
            ["run", "tests.acceptance.app:Task"],
            {},
            "BadInput",
            "dbworker: 'tests.acceptance.app:Task' is a DeclarativeAttributeIntercept, not a dbworker.Coordinator",
        ),
        (
            ["run", APP, "--concurrency", "main"],
            {},
            "BadInput",
            "dbworker: malformed --concurrency 'main'; expected NAME=N with N >= 1",
        ),
        (
            ["run", APP, "--concurrency", "nope=2"],
            {},
            "UnknownWorker",
            "dbworker: unknown worker 'nope' in --concurrency; known workers: main, other",
        ),
        (
            ["run", APP, "--drain-seconds", "soon"],
            {},
            "BadInput",
            "dbworker: --drain-seconds 'soon' is not a number",
        ),
        (
            ["inspect", APP, "--bogus"],
            {},
            "BadInput",
            "dbworker: unrecognized arguments: --bogus",
        ),
        (
            ["migrate", APP],
            {"DATABASE_URL": ""},
            "BadInput",
            "dbworker: getting 'tests.acceptance.app:coordinator' failed",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], reason: str, expected: str
) -> None:
    term = tmp_path / "termination-log"
    term.write_text("")
    env = {"DBWORKER_TERMINATION_LOG": str(term), **env}
    url = env.pop("DATABASE_URL", f"sqlite:///{tmp_path / 'app.sqlite'}")
    r = run_command(args, database_url=url, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(expected), r.stderr
    assert "Traceback" not in r.stderr
    # The same line, with the reason token the operator reads instead of the English text.
    assert term.read_text() == f"dbworker[{reason}]: " + r.stderr.removeprefix("dbworker: ")


def test_no_password_in_errors(tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    term.write_text("")
    r = run_command(
        ["migrate", APP],
        database_url="postgresql+psycopg://app:hunter2secret@127.0.0.1:1/nowhere",
        env={"DBWORKER_TERMINATION_LOG": str(term)},
    )
    assert r.returncode == 3
    assert r.stderr.startswith("dbworker: database unreachable:") and r.stderr.count("\n") == 1
    assert term.read_text() == "dbworker[DatabaseUnreachable]: " + r.stderr.removeprefix(
        "dbworker: "
    )
    assert "hunter2secret" not in r.stderr + r.stdout + term.read_text()


def test_migrate_needs_no_pod_extra(sqlite_db: AppDb) -> None:
    """Only `run` imports prometheus_client; an init container without the extra can migrate."""
    without_extra = (
        "import sys; sys.modules['prometheus_client'] = None; "  # any import of it now fails
        "from dbworker.pod import cli; raise SystemExit(cli.main())"
    )
    r = subprocess.run(
        [sys.executable, "-c", without_extra, "migrate", APP],
        cwd=ROOT,
        env=_env(sqlite_db.url, None),
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert r.returncode == 0, r.stderr
    assert "work tables up to date: main_work, other_work" in r.stdout


def test_missing_work_tables_are_named_with_the_fix(appdb: AppDb, tmp_path: Path) -> None:
    r = run_command(["inspect", APP], database_url=appdb.url)
    assert r.returncode == 2
    assert r.stderr == (
        "dbworker: table(s) main_work, other_work, main_history, other_history, dbworker_paused do not exist; "
        f"run `dbworker migrate {APP}` first\n"
    )


def test_metrics_port_in_use_is_exit_2(sqlite_db: AppDb) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = run_command(
            ["run", APP, "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
            database_url=sqlite_db.url,
        )
    assert r.returncode == 2
    assert r.stderr.startswith(f"dbworker: cannot listen on 127.0.0.1:{port} (--metrics-port): ")
    assert r.stderr.endswith("choose another port, or 0 to turn the HTTP server off\n")


def test_migrate_installs_the_wakeup_triggers_by_default_and_removes_them_when_told(appdb_all: AppDb) -> None:
    def count() -> int:
        with appdb_all.db.engine.connect() as conn:
            if appdb_all.db.backend == "postgresql":
                query = "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass('tasks') AND tgname LIKE 'dbworker_notify%%'"
            elif appdb_all.db.backend == "sqlite":
                query = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'dbworker_changes_%%'"
            else:
                query = ("SELECT count(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "
                         "AND TRIGGER_NAME LIKE 'dbworker_changes_%%'")  # fmt: skip
            return int(conn.exec_driver_sql(query.replace("%%", "%") if appdb_all.db.backend == "sqlite" else query).scalar_one())

    result = run_command(["migrate", APP], database_url=appdb_all.url)
    assert result.returncode == 0, result.stderr
    assert "wake-up triggers: on every source table" in result.stdout
    assert count() >= 2
    result = run_command(["migrate", APP, "--no-wakeup-triggers"], database_url=appdb_all.url)
    assert result.returncode == 0, result.stderr
    assert "wake-up triggers: none (workers poll)" in result.stdout
    assert count() == 0
    result = run_command(["migrate", APP, "--no-wakeup-triggers", "--notify-triggers"], database_url=appdb_all.url)
    assert result.returncode == 2 and "contradict" in result.stderr


def test_inspect_shows_a_handlers_control_sequences_inert(appdb: AppDb) -> None:
    """ESC, CSI and other C0/C1 characters from a handler's error never reach the terminal."""
    appdb.add({"id": 1})
    appdb.create_worker_tables()
    table = appdb.coordinator.workers["main"].table
    hostile = "\x1b]0;owned\x07\x1b[2J\x9b31mRuntimeError: gone\rX"
    with appdb.db.engine.begin() as conn:
        conn.execute(sa.insert(table), [{"source_id": 1, "execution_status": "failed", "error": hostile}])
    r = run_command(["inspect", APP, "--failed", "--worker", "main"], database_url=appdb.url)
    assert r.returncode == 0, r.stderr
    assert not any(c in r.stdout for c in "\x1b\x07\x9b\r"), repr(r.stdout)
    assert "  1: \\x1b]0;owned\\x07\\x1b[2J\\x9b31mRuntimeError: gone" in r.stdout.splitlines()  # its first line
    as_json = run_command(["inspect", APP, "--json", "--failed"], database_url=appdb.url)
    assert "\x1b" not in as_json.stdout
    assert json.loads(as_json.stdout)["workers"][0]["failed"][0]["error"] == hostile  # the data is unchanged


@pytest.mark.parametrize("command", ["retry", "cancel"])
def test_an_id_out_of_the_keys_range_exits_2_naming_it(appdb: AppDb, command: str) -> None:
    _seed_statuses(appdb)
    for huge in ("9223372036854775808", "-9223372036854775809", "99999999999999999999999999"):
        r = run_command([command, APP, "--worker", "main", "1", huge], database_url=appdb.url)
        assert r.returncode == 2, r.stderr
        assert r.stderr == f"dbworker: item ID {huge} is out of range of Task's primary key " \
            f"(-9223372036854775808..9223372036854775807): no item has it\n" or (
            appdb.backend != "sqlite" and f"item ID {huge} is out of range" in r.stderr), r.stderr  # fmt: skip
    for odd in ("1_0", "\u0661", "+1", " 1"):
        r = run_command([command, APP, "--worker", "main", odd], database_url=appdb.url)
        assert r.returncode == 2 and f"item ID {odd!r} is not an integer" in r.stderr, r.stderr
    assert str(appdb.state("main", 1)["execution_status"]) == "failed"  # nothing was done


def test_a_password_with_an_unencoded_at_is_masked_whole(tmp_path: Path) -> None:
    """A parser that stops at the first "@" echoes the password's tail as a host name; and the
    one-letter "password" it read must not be masked inside other words."""
    term = tmp_path / "termination-log"
    for password in ("P@ss", "O@pe", "s3cr@t@x"):
        term.write_text("")
        url = f"postgresql+psycopg://app:{password}@127.0.0.1:1/x"
        r = run_command(["migrate", APP], database_url=url, env={"DBWORKER_TERMINATION_LOG": str(term)})
        assert r.returncode == 3, r.stderr
        for text in (r.stderr, term.read_text()):
            assert "OperationalError" in text, text
            for piece in password.split("@"):
                assert f"'{piece}@" not in text and f"{piece}@127" not in text, text
