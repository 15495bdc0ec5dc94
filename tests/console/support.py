"""Aids of the console tests: a `dbworker console` subprocess and a signed-in HTTP client."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from tests.acceptance.support import APP, ROOT, _env, dbworker_command, free_port
from tests.helpers import kill, wait_until

TOKEN = "alice=correct-horse-battery-staple-42"
SECRET = TOKEN.split("=", 1)[1]


class ConsoleProcess:
    """A running `dbworker console` process on a free loopback port."""

    def __init__(
        self, database_url: str, log_dir: Path, *args: str, token: str | None = TOKEN, env: Mapping[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"console-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in close()
        extra = dict(env or {})
        if token is not None:
            extra["DBWORKER_CONSOLE_TOKEN"] = token
        self.process = subprocess.Popen(
            dbworker_command("console", APP, "--host", "127.0.0.1", "--port", str(self.port), *args),
            cwd=ROOT, env=_env(database_url, extra), stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        wait_until(self._up, timeout=60, what=f"the console to answer /healthz (log: {self.log_text()})")

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"dbworker console exited with {self.process.returncode}: {self.log_text()}")
        return self.get("/healthz")[0] == 200

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
        return request(self.url + path, headers=headers)

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def close(self) -> None:
        if self.process.poll() is None:
            kill(self.process.pid)
            self.process.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


def request(
    url: str, *, method: str = "GET", headers: Mapping[str, str] | None = None, data: bytes | None = None
) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, headers=dict(headers or {}), data=data)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

