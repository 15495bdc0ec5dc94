"""Unit tests of dbworker.pod.cli: one line on stderr, the exit code, the termination log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dbworker.pod import cli, termination
from tests.helpers import logging_restored


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    with logging_restored():  # main() configures logging; other tests rely on caplog
        yield


@pytest.fixture
def term(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    path.write_text("")
    monkeypatch.setenv(termination.TERMINATION_LOG_ENV, str(path))
    return path


def test_main_bad_input_prints_one_line_and_writes_termination_log(
    term: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "tests.unit.test_cli:nothing_here", "--concurrency", "bad"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("dbworker: malformed --concurrency 'bad'")
    assert term.read_text() == "dbworker[BadInput]: " + err.removeprefix("dbworker: ")


def test_main_unknown_module_is_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(termination.TERMINATION_LOG_ENV, "/nonexistent/dir/log")
    code = cli.main(["migrate", "no_such_module_dbw:coordinator", "--log-level", "ERROR"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.startswith("dbworker: cannot import module 'no_such_module_dbw'")
        and err.count("\n") == 1
    )


def test_main_unexpected_error_is_exit_1_with_its_reason(
    term: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(spec: str) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli.app, "load_app", broken)
    code = cli.main(["migrate", "a:c", "--log-level", "ERROR"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("dbworker: unexpected error: RuntimeError: boom")
    assert term.read_text().startswith("dbworker[Unexpected]: unexpected error: RuntimeError")
