"""Unit tests of dbworker.pod.cli: option parsing, environment, errors; no database, no child."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import redact
from dbworker.pod import cli
from tests.helpers import logging_restored


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    with logging_restored():  # main() configures logging; other tests rely on caplog
        yield


def parse(*argv: str, **env: str) -> cli.Options:
    return cli.parse(list(argv), env)


def error_of(*argv: str, **env: str) -> str:
    with pytest.raises(cli.CommandError) as info:
        cli.parse(list(argv), env)
    assert info.value.code == cli.EXIT_USAGE
    message = str(info.value)
    assert "\n" not in message
    return message


def test_run_defaults() -> None:
    o = parse("run", "app:coordinator")
    assert o.command == "run" and o.app == "app:coordinator"
    assert o["metrics_port"] == 9100
    assert o["metrics_host"] == "0.0.0.0"
    assert o["drain_seconds"] == 25.0
    assert o["backlog_seconds"] == 15.0
    assert o["create_tables"] is False
    assert o["worker"] is None and o["concurrency"] is None
    assert (
        o["lease_seconds"] is None and o["poll_seconds"] is None and o["max_poll_seconds"] is None
    )
    assert o["log_format"] == "text" and o["log_level"] == "INFO"


def test_flags() -> None:
    o = parse(
        "run", "app:c", "--worker", "a", "--worker", "b", "--concurrency", "a=2", "--concurrency", "b=3",
        "--metrics-port", "0", "--drain-seconds", "1.5", "--create-tables", "--log-format", "JSON",
        "--log-level", "debug", "--lease-seconds", "4", "--poll-seconds", "0.1", "--max-poll-seconds", "2",
        "--backlog-seconds", "0", "--metrics-host", "127.0.0.1",
    )  # fmt: skip
    assert o["worker"] == ["a", "b"]
    assert o["concurrency"] == {"a": 2, "b": 3}
    assert o["metrics_port"] == 0 and o["drain_seconds"] == 1.5 and o["create_tables"] is True
    assert o["log_format"] == "json" and o["log_level"] == "DEBUG"
    assert (o["lease_seconds"], o["poll_seconds"], o["max_poll_seconds"]) == (4, 0.1, 2)
    assert o["backlog_seconds"] == 0 and o["metrics_host"] == "127.0.0.1"


def test_environment_fills_every_option_and_flags_win() -> None:
    env = {
        "DBWORKER_APP": "envapp:c",
        "DBWORKER_WORKER": "a, b",
        "DBWORKER_CONCURRENCY": "a=2,b=3",
        "DBWORKER_METRICS_PORT": "9200",
        "DBWORKER_METRICS_HOST": "::",
        "DBWORKER_DRAIN_SECONDS": "60",
        "DBWORKER_CREATE_TABLES": "true",
        "DBWORKER_LOG_FORMAT": "json",
        "DBWORKER_LOG_LEVEL": "WARNING",
        "DBWORKER_LEASE_SECONDS": "20",
        "DBWORKER_POLL_SECONDS": "0.5",
        "DBWORKER_MAX_POLL_SECONDS": "5",
        "DBWORKER_BACKLOG_SECONDS": "30",
    }
    o = parse("run", **env)
    assert (
        o.app == "envapp:c" and o["worker"] == ["a", "b"] and o["concurrency"] == {"a": 2, "b": 3}
    )
    assert o["metrics_port"] == 9200 and o["metrics_host"] == "::" and o["drain_seconds"] == 60
    assert o["create_tables"] is True and o["log_format"] == "json" and o["log_level"] == "WARNING"
    assert (o["lease_seconds"], o["poll_seconds"], o["max_poll_seconds"]) == (20, 0.5, 5)
    assert o["backlog_seconds"] == 30
    assert o.source("drain_seconds") == "DBWORKER_DRAIN_SECONDS"
    flagged = parse("run", "flagapp:c", "--drain-seconds", "3", "--worker", "z", **env)
    assert (
        flagged.app == "flagapp:c" and flagged["drain_seconds"] == 3 and flagged["worker"] == ["z"]
    )
    assert flagged.source("drain_seconds") == "--drain-seconds"


def test_empty_variable_means_unset() -> None:
    assert parse("run", "a:c", DBWORKER_DRAIN_SECONDS="")["drain_seconds"] == 25


def test_every_option_and_its_variable_is_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in cli.ALL:
        with pytest.raises(SystemExit) as info:
            cli.parse([command, "--help"], {})
        assert info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for opt in cli.OPTIONS:
            if command in opt.commands:
                assert opt.flag in text and opt.env in text, (command, opt.flag)


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["run"], {}, "missing MODULE:ATTR"),
        ([], {}, "missing command"),
        (
            ["run", "a:c", "--concurrency", "hash"],
            {},
            "malformed --concurrency 'hash'; expected NAME=N",
        ),
        (["run", "a:c", "--concurrency", "hash=0"], {}, "malformed --concurrency 'hash=0'"),
        (["run", "a:c", "--concurrency", "hash=x"], {}, "malformed --concurrency 'hash=x'"),
        (["run", "a:c", "--concurrency", "=2"], {}, "malformed --concurrency '=2'"),
        (["run", "a:c"], {"DBWORKER_CONCURRENCY": "a=2,b"}, "malformed DBWORKER_CONCURRENCY 'b'"),
        (["run", "a:c", "--drain-seconds", "soon"], {}, "--drain-seconds 'soon' is not a number"),
        (["run", "a:c", "--drain-seconds", "-1"], {}, "--drain-seconds must be at least 0"),
        (["run", "a:c", "--drain-seconds", "nan"], {}, "not a finite number"),
        (
            ["run", "a:c"],
            {"DBWORKER_METRICS_PORT": "http"},
            "DBWORKER_METRICS_PORT 'http' is not a whole number",
        ),
        (["run", "a:c", "--metrics-port", "70000"], {}, "--metrics-port 70000 is not a port"),
        (["run", "a:c", "--lease-seconds", "0"], {}, "--lease-seconds must be greater than 0"),
        (
            ["run", "a:c", "--poll-seconds", "2", "--max-poll-seconds", "1"],
            {},
            "--max-poll-seconds (1) is below --poll-seconds (2)",
        ),
        (["run", "a:c", "--log-format", "xml"], {}, "--log-format 'xml' is not one of text, json"),
        (
            ["run", "a:c"],
            {"DBWORKER_LOG_LEVEL": "loud"},
            "DBWORKER_LOG_LEVEL 'loud' is not one of debug",
        ),
        (
            ["run", "a:c"],
            {"DBWORKER_CREATE_TABLES": "maybe"},
            "DBWORKER_CREATE_TABLES='maybe' is not a boolean",
        ),
        (["run", "a:c", "--bogus"], {}, "unrecognized arguments: --bogus"),
        (["retry", "a:c", "1"], {}, "retry needs exactly one --worker"),
        (["retry", "a:c", "--worker", "w"], {}, "nothing to retry"),
        (
            ["retry", "a:c", "--worker", "w", "--all-failed", "3"],
            {},
            "either item IDs or --all-failed",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_fault(
    argv: list[str], env: dict[str, str], expected: str
) -> None:
    assert expected in error_of(*argv, **env)


def test_retry_and_inspect_options() -> None:
    r = parse("retry", "a:c", "--worker", "w", "1", "2")
    assert r.ids == ("1", "2") and r["worker"] == ["w"] and r["all_failed"] is False
    assert parse("retry", "a:c", "--worker", "w", "--all-failed")["all_failed"] is True
    i = parse("inspect", "a:c", "--failed", "--json")
    assert i["failed"] is True and i["json"] is True
    assert parse("inspect", "a:c", DBWORKER_JSON="1")["json"] is True


# --- working on a (fake) coordinator -----------------------------------------------------


class FakeCoordinator:
    def __init__(self, *names: str) -> None:
        self.workers = {n: SimpleNamespace(concurrency=1) for n in names}
        self.lease_seconds, self.poll_seconds, self.max_poll_seconds = 30.0, 0.25, 10.0
        self.configured: dict[str, float] = {}

    def set_concurrency(self, name: str, n: int) -> None:
        self.workers[name].concurrency = n

    def configure(self, **kw: float) -> None:
        if kw.get("lease_seconds", 1) > 1000:
            raise ValueError("lease_seconds must be at most 1000")
        self.configured.update(kw)


def test_select_workers() -> None:
    c: Any = FakeCoordinator("hash", "compare")
    assert cli.select_workers(c, parse("run", "a:c")) == ["hash", "compare"]
    assert cli.select_workers(c, parse("run", "a:c", "--worker", "compare")) == ["compare"]
    with pytest.raises(cli.CommandError) as info:
        cli.select_workers(c, parse("run", "a:c", DBWORKER_WORKER="hash,x"))
    assert str(info.value) == "unknown worker 'x' (DBWORKER_WORKER); known workers: hash, compare"
    with pytest.raises(cli.CommandError, match="registers no workers"):
        cli.select_workers(FakeCoordinator(), parse("run", "a:c"))  # type: ignore[arg-type]


def test_apply_overrides() -> None:
    c: Any = FakeCoordinator("hash", "compare")
    slots = cli.apply_overrides(
        c, parse("run", "a:c", "--concurrency", "hash=4", "--lease-seconds", "9")
    )
    assert slots == {"hash": 4, "compare": 1}
    assert c.configured == {"lease_seconds": 9}
    with pytest.raises(
        cli.CommandError,
        match=r"unknown worker 'nope' in --concurrency; known workers: hash, compare",
    ):
        cli.apply_overrides(c, parse("run", "a:c", "--concurrency", "nope=2"))
    # Checked against what the code set: max_poll 10 from the code, poll 20 from the flag.
    with pytest.raises(cli.CommandError, match="below the first"):
        cli.apply_overrides(c, parse("run", "a:c", "--poll-seconds", "20"))
    with pytest.raises(
        cli.CommandError, match="--lease-seconds: lease_seconds must be at most 1000"
    ):
        cli.apply_overrides(c, parse("run", "a:c", "--lease-seconds", "5000"))


def test_render_table() -> None:
    report = [
        {"worker": "hash", "counts": {"working": 1, "unfinished": 2, "finished": 30, "failed": 0}, "claimable": 1000, "claimable_capped": True},
        {"worker": "compare", "counts": {"working": 0, "unfinished": 0, "finished": 0, "failed": 4}, "claimable": 0, "claimable_capped": False},
    ]  # fmt: skip
    lines = cli.render_table(report).splitlines()
    assert lines[0].split() == [
        "WORKER",
        "WORKING",
        "UNFINISHED",
        "FINISHED",
        "FAILED",
        "CLAIMABLE",
    ]
    assert lines[1].split() == ["hash", "1", "2", "30", "0", "1000+"]
    assert lines[2].split() == ["compare", "0", "0", "0", "4", "0"]


class Base(DeclarativeBase):
    pass


class IntRow(Base):
    __tablename__ = "int_row"
    id: Mapped[int] = mapped_column(primary_key=True)


class UuidRow(Base):
    __tablename__ = "uuid_row"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)


class TextRow(Base):
    __tablename__ = "text_row"
    id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)


def test_convert_id_follows_the_primary_key_type() -> None:
    assert cli.convert_id("42", IntRow) == 42
    u = uuid.uuid4()
    assert cli.convert_id(str(u), UuidRow) == u
    assert cli.convert_id("k-1", TextRow) == "k-1"
    with pytest.raises(cli.CommandError, match="item ID 'x' is not an integer"):
        cli.convert_id("x", IntRow)


# --- the application spec -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tests", "malformed MODULE:ATTR 'tests'"),
        ("tests:", "malformed MODULE:ATTR"),
        ("no_such_module_dbw:c", "cannot import module 'no_such_module_dbw'"),
        ("json:no_such_attr", "module 'json' has no attribute 'no_such_attr'"),
        ("json:dumps", "'json:dumps' is a function, not a dbworker.Coordinator"),
    ],
)
def test_load_app_errors(spec: str, expected: str) -> None:
    with pytest.raises(cli.CommandError) as info:
        cli.load_app(spec)
    assert expected in str(info.value) and info.value.code == cli.EXIT_USAGE


def test_load_app_reports_import_time_failures_without_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "brokenapp_dbw.py").write_text(
        "raise RuntimeError('cannot connect to postgresql://app:s3cret@db/app')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(cli.CommandError) as info:
        cli.load_app("brokenapp_dbw:coordinator")
    message = str(info.value)
    assert "importing 'brokenapp_dbw' failed: RuntimeError" in message
    # The message is redacted where it is printed.
    assert "s3cret" not in redact.redact(message)


# --- main: one line, exit code, termination log ---------------------------------------------


def test_main_bad_input_prints_one_line_and_writes_termination_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    term = tmp_path / "termination-log"
    term.write_text("")
    monkeypatch.setenv(cli.TERMINATION_LOG_ENV, str(term))
    code = cli.main(["run", "tests.unit.test_cli:nothing_here", "--concurrency", "bad"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("dbworker: malformed --concurrency 'bad'")
    assert term.read_text() == err


def test_main_unknown_module_is_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cli.TERMINATION_LOG_ENV, "/nonexistent/dir/log")
    code = cli.main(["migrate", "no_such_module_dbw:coordinator", "--log-level", "ERROR"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.startswith("dbworker: cannot import module 'no_such_module_dbw'")
        and err.count("\n") == 1
    )


def test_termination_log_is_only_written_to_an_existing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent"
    monkeypatch.setenv(cli.TERMINATION_LOG_ENV, str(missing))
    cli.write_termination_log("dbworker: x")
    assert not missing.exists()
