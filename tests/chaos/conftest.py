"""Helpers for crash tests: coordinators as real processes that can be killed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import App, app, db  # noqa: F401 - re-exported fixtures

ROOT = Path(__file__).resolve().parents[2]


class Processes:
    """Coordinator processes started by a test; all killed at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def coordinator(self, url: str, *args: str, env: dict[str, str] | None = None,
                    module: str = "tests.apps.runner") -> subprocess.Popen[str]:  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", module, url, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() in ("started", "created"), f"coordinator process said {line!r}"
        return proc

    def close(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


@pytest.fixture
def processes() -> Iterator[Processes]:
    p = Processes()
    try:
        yield p
    finally:
        p.close()
