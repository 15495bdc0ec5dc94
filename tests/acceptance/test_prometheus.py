"""End to end with a real Prometheus server scraping a running worker.

Prometheus (Debian's package) gets a temporary config and data directory and random free
ports; the test asks its HTTP API for ``dbworker_claims_total``.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.acceptance.conftest import AppDb
from tests.acceptance.support import Worker, free_port
from tests.helpers import wait_until

PROMETHEUS = shutil.which("prometheus")


class Prometheus:
    def __init__(self, tmp_path: Path, target: str) -> None:
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: dbworker\n    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log_path = tmp_path / "prometheus.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in close()
        assert PROMETHEUS is not None
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def query(self, expr: str) -> list[dict[str, object]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


@pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: prometheus)"
)
def test_prometheus_scrapes_claims_from_a_running_worker(
    sqlite_db: AppDb, start_worker: Callable[..., Worker], tmp_path: Path
) -> None:
    sqlite_db.add(*({"id": i} for i in range(1, 4)))
    w = start_worker(sqlite_db, "--create-tables", "--worker", "main")
    w.wait_ready()
    w.wait_value("dbworker_executions_total", 3, worker="main", outcome="finished")
    prom = Prometheus(tmp_path, f"127.0.0.1:{w.port}")
    try:
        result = wait_until(
            lambda: prom.query('dbworker_claims_total{worker="main"}'),
            timeout=90,
            what="Prometheus to return dbworker_claims_total",
        )
        assert len(result) == 1
        sample = result[0]
        assert sample["metric"]["job"] == "dbworker"  # type: ignore[index]
        assert float(sample["value"][1]) == 3  # type: ignore[index]
        up = prom.query('up{job="dbworker"}')
        assert float(up[0]["value"][1]) == 1  # type: ignore[index]
    finally:
        prom.close()
    w.signal(signal.SIGTERM)
    assert w.wait_exit() == 0
