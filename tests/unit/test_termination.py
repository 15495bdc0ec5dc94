"""Unit tests of dbworker.pod.termination: reason tokens, the two line formats, the log file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dbworker.pod import termination


def test_reasons_are_camel_case_tokens() -> None:
    assert termination.REASONS == (
        "UnknownWorker",
        "BadInput",
        "DatabaseUnreachable",
        "Unexpected",
    )
    for reason in termination.REASONS:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason), reason


def test_reason_follows_the_exit_code_unless_given() -> None:
    assert termination.CommandError("x").reason == termination.BAD_INPUT
    assert termination.CommandError("x", termination.EXIT_DATABASE).reason == (
        termination.DATABASE_UNREACHABLE
    )
    assert termination.CommandError("x", termination.EXIT_UNEXPECTED).reason == (
        termination.UNEXPECTED
    )
    named = termination.CommandError("x", reason=termination.UNKNOWN_WORKER)
    assert named.code == termination.EXIT_USAGE and named.reason == termination.UNKNOWN_WORKER


def test_lines_are_one_line_and_masked() -> None:
    message = "cannot reach postgresql://app:s3cret@db/app\nsecond line"
    stderr = termination.stderr_line(message)
    term = termination.termination_line(message, termination.DATABASE_UNREACHABLE)
    assert stderr.startswith("dbworker: cannot reach ") and "\n" not in stderr
    assert term == "dbworker[DatabaseUnreachable]: " + stderr.removeprefix("dbworker: ")
    assert "s3cret" not in stderr + term


def test_termination_log_is_only_written_to_an_existing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent"
    monkeypatch.setenv(termination.TERMINATION_LOG_ENV, str(missing))
    termination.write("dbworker[BadInput]: x")
    assert not missing.exists()
    present = tmp_path / "present"
    present.write_text("")
    monkeypatch.setenv(termination.TERMINATION_LOG_ENV, str(present))
    termination.write("dbworker[BadInput]: x")
    assert present.read_text() == "dbworker[BadInput]: x\n"
