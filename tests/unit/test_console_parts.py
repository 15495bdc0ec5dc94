"""Unit tests of the console's pure parts: tokens, what a page may show, redirects, claimers."""

from __future__ import annotations

import os
import socket

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker.console import tokens, tracelinks
from dbworker.pod import options, termination
from dbworker.sql import claimer, keys, tables


class Base(DeclarativeBase):
    pass


class Small(Base):
    __tablename__ = "small"
    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)


class Text(Base):
    __tablename__ = "text_keys"
    id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)


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


def test_trace_url_option_and_variable() -> None:
    o = options.parse(["console", "app:c", "--trace-url", " http://jaeger:16686/trace/{trace_id} "], {})
    assert o["trace_url"] == "http://jaeger:16686/trace/{trace_id}"
    o = options.parse(["console", "app:c"], {"DBWORKER_TRACE_URL": "https://g.example/x?t={trace_id}&s={span_id}"})
    assert o["trace_url"] == "https://g.example/x?t={trace_id}&s={span_id}"
    assert options.parse(["console", "app:c"], {})["trace_url"] is None
    assert tracelinks.link("https://g.example/x?t={trace_id}&s={span_id}", "ab" * 16, "cd" * 8) == (
        f"https://g.example/x?t={'ab' * 16}&s={'cd' * 8}")  # fmt: skip
    assert tracelinks.link("http://j/trace/{trace_id}", None, None) is None
    assert tracelinks.link(None, "ab" * 16, "cd" * 8) is None


@pytest.mark.parametrize(("template", "says"), [
    ("http://jaeger:16686/search", "has no {trace_id}"),
    ("http://jaeger/{trace}", "unknown field {trace}"),
    ("jaeger/trace/{trace_id}", "is not an http(s) address"),
    ("javascript:alert(1)//{trace_id}", "is not an http(s) address"),
    ("http://jaeger/{trace_id", "is not an address template"),
])  # fmt: skip
def test_bad_trace_url_names_the_field(template: str, says: str) -> None:
    with pytest.raises(termination.CommandError) as info:
        options.parse(["console", "app:c"], {"DBWORKER_TRACE_URL": template})
    assert str(info.value).startswith("DBWORKER_TRACE_URL: ") and says in str(info.value)
    with pytest.raises(termination.CommandError, match=r"^--trace-url: "):
        options.parse(["console", "app:c", "--trace-url", template], {})


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


def test_shown_cuts_a_long_value_before_masking_it() -> None:
    """A megabyte column costs what the 300 shown characters cost; a password the cut ends
    inside stays hidden."""
    pytest.importorskip("fastapi")
    import time

    from dbworker.console import queries

    start = time.perf_counter()
    shown = queries.shown("body", "0123456789abcdef" * 100_000)
    assert time.perf_counter() - start < 2.0 and shown.endswith("… (1600000 characters)")
    assert len(shown) < queries.LONG_TEXT + 40
    cut_inside = queries.shown("note", "x" * (queries.LONG_TEXT - 20) + " postgresql://u:hunter2hunter2@db/x")
    assert "hunter" not in cut_inside and "postgresql://u:***" in cut_inside


def test_keys_refuse_integers_not_written_plainly_and_bound_the_range() -> None:
    pg, my, lite = postgresql.dialect(), mysql.dialect(), sqlite.dialect()
    assert keys.parse("-12", Small, pg) == -12 and keys.parse("0", Small, pg) == 0
    for odd in ("1_0", "\u0661\u0660", "+1", " 1", "1 ", "01", "0x1", "1e1", "", "-", "1\u0660"):
        with pytest.raises(ValueError, match="is not an integer") as info:
            keys.parse(odd, Small, pg)
        assert not isinstance(info.value, keys.OutOfRange)
    with pytest.raises(keys.OutOfRange, match=r"item ID 2147483648 is out of range"):
        keys.parse("2147483648", Small, pg)
    with pytest.raises(keys.OutOfRange):
        keys.parse("-2147483649", Small, my)
    assert keys.parse("2147483648", Small, lite) == 2147483648  # SQLite integers are 64-bit
    with pytest.raises(keys.OutOfRange):
        keys.parse("9223372036854775808", Small, lite)
    assert keys.parse(" a/b ✓", Text, pg) == " a/b ✓"  # text keys are taken as they are


def test_failed_sign_ins_wait_longer_each_time_and_memory_is_bounded() -> None:
    pytest.importorskip("fastapi")
    from dbworker.console import auth

    now = [0.0]
    throttle = auth.Throttle(clock=lambda: now[0])
    for _ in range(auth.FREE_FAILURES - 1):
        throttle.failed("a")
    assert throttle.wait("a") == 0.0
    throttle.failed("a")
    assert throttle.wait("a") == 1.0 and throttle.wait("b") == 0.0
    throttle.failed("a")
    assert throttle.wait("a") == 2.0
    for _ in range(40):
        throttle.failed("a")
    assert throttle.wait("a") == auth.FAILURE_WAIT_MAX
    throttle.succeeded("a")
    assert throttle.wait("a") == 0.0
    for n in range(auth.CLIENTS_MAX + 50):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(throttle) <= auth.CLIENTS_MAX  # the bound is the point


@pytest.mark.parametrize(
    ("host", "ok"),
    [("localhost", True), ("LOCALHOST:80", True), ("localhost.", True), ("127.0.0.1", True), ("127.9.9.9:1", True),
     ("[::1]", True), ("[::1]:8080", True), ("", False), ("evil.example", False), ("127.0.0.1.evil.example", False),
     ("localhost.evil.example:80", False), ("[::2]:80", False), ("0.0.0.0", False), ("10.0.0.1", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, ok: bool) -> None:
    pytest.importorskip("fastapi")
    from starlette.requests import Request

    from dbworker.console import auth

    request = Request({"type": "http", "headers": [(b"host", host.encode())] if host else []})
    assert auth.loopback_host(request) is ok


def test_ids_of_a_traceparent_only_when_sampled() -> None:
    from dbworker import tracing

    trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    assert tracing.ids_of(f"00-{trace}-{span}-01") == (trace, span)
    assert tracing.ids_of(f"00-{trace}-{span}-03") == (trace, span)
    assert tracing.ids_of(f"00-{trace}-{span}-00") is None  # sampled away: never exported
    assert tracing.ids_of(f"00-{trace}-{span}-zz") is None and tracing.ids_of(None) is None
    assert tracing.ids_of("garbage") is None
