"""Unit tests of dbworker.logs: text and JSON lines, levels, passwords masked."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from dbworker import logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    logger = logging.getLogger("dbworker")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield io.StringIO()
    # Other tests rely on caplog, which needs the logger as it was.
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


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
