"""Unit tests of the console's pure parts: tokens, what a page may show, redirects, claimers."""

from __future__ import annotations

import os
import socket

import pytest

from dbworker.console import tokens
from dbworker.pod import options, termination
from dbworker.sql import claimer, tables


def test_tokens_named_and_unnamed() -> None:
    assert tokens.parse(["alice=0123456789abcdef", "fedcba9876543210"], where="--token") == {
        "alice": "0123456789abcdef",
        "token": "fedcba9876543210",
    }


@pytest.mark.parametrize("bad", ["short", "with space 0123456789", "alice=short"])
def test_bad_tokens_name_the_option_and_not_the_secret(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        tokens.parse([bad], where="DBWORKER_CONSOLE_TOKEN")
    assert str(info.value).startswith("DBWORKER_CONSOLE_TOKEN: token 1 is not usable")
    assert bad.split("=")[-1] not in str(info.value)


def test_two_tokens_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="two tokens are named 'alice'"):
        tokens.parse(["alice=0123456789abcdef", "alice=fedcba9876543210"], where="--token")


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                                ("0.0.0.0", False), ("10.0.0.5", False), ("example.org", False)])  # fmt: skip
def test_loopback(host: str, loopback: bool) -> None:
    assert tokens.is_loopback(host) is loopback


def test_console_options() -> None:
    o = options.parse(["console", "app:c"], {"DBWORKER_CONSOLE_TOKEN": "ops=0123456789abcdef"})
    assert o["host"] == "127.0.0.1" and o["port"] == 8080 and o["read_only"] is False
    assert o["token"] == {"ops": "0123456789abcdef"}
    o = options.parse(["console", "app:c", "--host", "0.0.0.0", "--token", "0123456789abcdef", "--read-only"], {})
    assert o["token"] == {"token": "0123456789abcdef"} and o["read_only"] is True
    assert options.parse(["console", "app:c"], {})["token"] == {}  # loopback without a token


def test_console_option_errors() -> None:
    with pytest.raises(termination.CommandError, match=r"needs a sign-in token to listen on '0\.0\.0\.0'"):
        options.parse(["console", "app:c", "--host", "0.0.0.0"], {})
    with pytest.raises(termination.CommandError, match=r"--port 0 must be at least 1|--port must be at least 1"):
        options.parse(["console", "app:c", "--port", "0"], {})
    with pytest.raises(termination.CommandError, match="resume needs exactly one --worker NAME"):
        options.parse(["resume", "app:c"], {})


def test_claimer_identity_is_host_and_pid() -> None:
    host, pid = claimer.split(claimer.identity())
    assert host == socket.gethostname()[: tables.CLAIMER_LENGTH] and pid == os.getpid()
    assert len(claimer.identity()) <= tables.CLAIMER_LENGTH
    assert claimer.split(None) == (None, None)
    assert claimer.split("pod-a:12") == ("pod-a", 12)


def test_shown_values() -> None:
    pytest.importorskip("fastapi")
    from dbworker.console import queries

    assert queries.shown("data", b"\x00" * 2048) == "<2048 bytes>"
    assert queries.shown("note", "x" * 1000).endswith("… (1000 characters)")
    assert queries.shown("api_key", "abc").startswith("***")
    assert queries.shown("password_hash", None) == "NULL"
    assert queries.shown("url", "postgresql://u:hunter2@db/x") == "postgresql://u:***@db/x"
    assert queries.shown("note", "the pw is s3cr3t-value", ("s3cr3t-value",)) == "the pw is ***"


def test_redirect_targets_stay_on_the_console() -> None:
    pytest.importorskip("fastapi")
    from dbworker.console import auth

    assert auth.safe_next("/workers/a?status=failed") == "/workers/a?status=failed"
    for bad in ("//evil.example", "https://evil.example/", "evil", "/\\evil", None, ""):
        assert auth.safe_next(bad) == "/"
