"""Unit tests of dbworker.pod.options: flags, DBWORKER_* variables, --help, bad input."""

from __future__ import annotations

import pytest

from dbworker.pod import options, termination


def parse(*argv: str, **env: str) -> options.Options:
    return options.parse(list(argv), env)


def error_of(*argv: str, **env: str) -> termination.CommandError:
    with pytest.raises(termination.CommandError) as info:
        options.parse(list(argv), env)
    assert info.value.code == termination.EXIT_USAGE
    assert "\n" not in str(info.value)
    return info.value


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
    for command in options.ALL:
        with pytest.raises(SystemExit) as info:
            options.parse([command, "--help"], {})
        assert info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for opt in options.OPTIONS:
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
            "--max-poll-seconds (1) must be >= --poll-seconds (2)",
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
        (["cancel", "a:c", "1"], {}, "cancel needs exactly one --worker"),
        (["cancel", "a:c", "--worker", "w"], {}, "nothing to cancel: give the item IDs"),
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
    error = error_of(*argv, **env)
    assert expected in str(error)
    assert error.reason == termination.BAD_INPUT


def test_retry_and_inspect_options() -> None:
    r = parse("retry", "a:c", "--worker", "w", "1", "2")
    assert r.ids == ("1", "2") and r["worker"] == ["w"] and r["all_failed"] is False
    assert parse("retry", "a:c", "--worker", "w", "--all-failed")["all_failed"] is True
    i = parse("inspect", "a:c", "--failed", "--json")
    assert i["failed"] is True and i["json"] is True
    assert parse("inspect", "a:c", DBWORKER_JSON="1")["json"] is True
