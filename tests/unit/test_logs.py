"""Unit tests of dbworker.logs: text and JSON lines, levels, passwords masked."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import pytest

from dbworker import logs, redact
from tests.helpers import logging_restored


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    with logging_restored():
        yield io.StringIO()


def test_text_lines_mask_url_passwords(stream: io.StringIO) -> None:
    logs.setup(level="info", fmt="text", stream=stream)
    logging.getLogger("dbworker.x").info("connecting to %s", "postgresql://app:s3cret@db:5432/app")
    logging.getLogger("dbworker.x").debug("hidden at INFO")
    text = stream.getvalue()
    assert "s3cret" not in text and "postgresql://app:***@db:5432/app" in text
    assert "INFO dbworker.x: connecting" in text and "hidden" not in text


def test_json_lines_and_extra_secrets(stream: io.StringIO) -> None:
    logs.setup(level="DEBUG", fmt="json", stream=stream, secrets=("pa55word",))
    try:
        raise ValueError("login failed with pa55word")
    except ValueError:
        logging.getLogger("dbworker").exception("boom")
    entry = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert (
        entry["level"] == "ERROR" and entry["logger"] == "dbworker" and entry["message"] == "boom"
    )
    assert "ValueError" in entry["exception"] and "pa55word" not in stream.getvalue()


def test_masked_secrets_apply_to_later_lines(stream: io.StringIO) -> None:
    logs.setup(level="INFO", fmt="text", stream=stream)
    logs.mask("letmein42")
    logging.getLogger("dbworker").warning("driver said: password letmein42 rejected")
    assert "letmein42" not in stream.getvalue()


def test_setup_twice_keeps_one_handler(stream: io.StringIO) -> None:
    logs.setup(stream=stream)
    logs.setup(stream=stream)
    ours = [
        h for h in logging.getLogger("dbworker").handlers if getattr(h, "_dbworker_setup", False)
    ]
    assert len(ours) == 1


def test_bad_level_and_format() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        logs.setup(level="loud")
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.setup(fmt="xml")


def test_the_applications_loggers_share_the_line_format_unless_it_set_up_its_own(
    stream: io.StringIO,
) -> None:
    root = logging.getLogger()
    root.handlers[:] = []  # an application that configured no logging (pytest's capture aside)
    logs.setup(level="INFO", fmt="json", stream=stream, worker="hash")
    logging.getLogger("myapp.jobs").info("image %s hashed", 7)
    logging.getLogger("myapp.jobs").debug("not at INFO")
    [entry] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert entry["logger"] == "myapp.jobs" and entry["message"] == "image 7 hashed"
    assert entry["worker"] == "hash" and entry["level"] == "INFO"
    assert logs.active() == ("INFO", "json")

    own = logging.StreamHandler(io.StringIO())
    root.handlers[:] = [own]  # the application's own set-up is left alone
    logs.setup(level="INFO", fmt="text", stream=stream)
    assert root.handlers == [own]


def test_text_lines_escape_terminal_control_sequences(stream: io.StringIO) -> None:
    """A handler's error holding ESC/CSI/C1 sequences reaches the reader's terminal inert."""
    logs.setup(level="INFO", fmt="text", stream=stream)
    try:
        raise RuntimeError("\x1b]0;owned\x07\x1b[2J\x9b31m\rgone")
    except RuntimeError:
        logging.getLogger("dbworker.x").exception("handler said %s", "\x1b[31mred")
    text = stream.getvalue()
    assert not any(c in text for c in "\x1b\x07\x9b\r")
    assert "\\x1b[31mred" in text and "\\x1b]0;owned\\x07" in text and "\n" in text


def test_json_lines_carry_no_raw_control_characters(stream: io.StringIO) -> None:
    logs.setup(level="INFO", fmt="json", stream=stream)
    logging.getLogger("dbworker.x").warning("a\x1b[2Jb\x9bc")
    line = stream.getvalue().strip()
    assert (
        not any(c in line for c in "\x1b\x9b") and json.loads(line)["message"] == "a\x1b[2Jb\x9bc"
    )


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_huge_records_are_cut_before_anything_reads_them(stream: io.StringIO, fmt: str) -> None:
    """A megabyte message or exception is cut to its bound (each part), in milliseconds."""
    logs.setup(level="INFO", fmt=fmt, stream=stream)
    huge = "ab12" * 500_000
    start = time.perf_counter()
    try:
        raise ValueError(huge)
    except ValueError:
        logging.getLogger("dbworker.x").exception("message %s", huge)
    assert time.perf_counter() - start < 2.0
    text = stream.getvalue()
    assert len(text) < 3 * redact.MAX_CHARS and "(truncated)" in text
    if fmt == "json":  # each field is cut on its own: the line still parses
        entry = json.loads(text)
        assert entry["message"].endswith(redact.CUT) and entry["exception"].startswith("Traceback")
