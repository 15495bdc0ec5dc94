"""The imagededup system as the tests run it: the API and `dbworker run` as two processes.

Processes are started with the demo's own `Service` (one copy of how to start and stop
them) and always stopped with SIGTERM at the end of the test, SIGKILL only past a bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from examples.imagededup import demo
from tests.conftest import open_database
from tests.helpers import wait_until

APP = "examples.imagededup.app:coordinator"
T = TypeVar("T")


@dataclass
class System:
    api: demo.Service
    worker: demo.Service
    client: httpx.Client
    metrics_url: str

    def metrics(self) -> str:
        return httpx.get(self.metrics_url, timeout=10).text

    def progress(self) -> dict[str, dict[str, int]]:
        response = self.client.get("/progress")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def wait(self, predicate: Callable[[], T | None], *, what: str, timeout: float = 90) -> T:
        """`wait_until`, except that a service that exits ends the wait at once, with its log."""
        exited: list[str] = []

        def check() -> T | bool | None:
            for service in (self.api, self.worker):
                if service.process is not None and service.process.poll() is not None:
                    code = service.process.returncode
                    exited.append(
                        f"the {service.name} exited ({code}) while waiting for {what}:\n{service.log_tail()}"
                    )
                    return True
            return predicate()

        result = wait_until(check, timeout=timeout, interval=0.1, what=what)
        if exited:
            pytest.fail(exited[0])
        return result  # type: ignore[return-value]

    def wait_settled(self, what: str) -> dict[str, dict[str, int]]:
        """The /progress counts, once nothing is pending for either worker."""

        def settled() -> dict[str, dict[str, int]] | None:
            progress = self.progress()
            return progress if all(c["pending"] == 0 for c in progress.values()) else None

        return self.wait(settled, what=what)


def start_system(database_url: str, workdir: Path) -> System:
    api, worker, api_port, metrics_port = demo.services(database_url, workdir, poll_seconds=0.05)
    client = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=30)
    return System(api, worker, client, f"http://127.0.0.1:{metrics_port}/metrics")


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def system(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[System]:
    """API up (schema created), then the worker service up and ready; both stopped after."""
    with contextlib.contextmanager(open_database)(request.param, tmp_path) as database:
        running = start_system(database.url, tmp_path)
        try:
            running.api.start()
            running.wait(
                lambda: running.client.get("/healthz").status_code == 200,
                what="the API",
                timeout=60,
            )
            running.worker.start()
            ready_url = running.metrics_url.replace("/metrics", "/readyz")
            running.wait(
                lambda: httpx.get(ready_url, timeout=5).status_code == 200,
                what="the worker service's /readyz",
                timeout=60,
            )
            yield running
        finally:
            running.client.close()
            for service in (running.worker, running.api):
                service.stop(timeout=40)
