"""A real worker (`dbworker run` on tests/chart/app.py and a SQLite file) scraped twice:
directly, to check every metric name the dashboards and rules read is on its /metrics; and
by a real Prometheus server, which evaluates every dashboard panel's query and the alert
rules on the worker's live series.

One worker and one Prometheus serve the whole module; both are stopped at its end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.chart import queries
from tests.chart.conftest import REPO, RULES
from tests.helpers import kill, wait_until

NAMESPACE = "chart-test"
POD = "worker-0"
OK_ITEMS, FAILING_ITEMS = 12, 3
SCRAPE = "1s"
# Grafana's $__rate_interval is at least four scrape intervals; Prometheus needs two samples.
RATE_INTERVAL = "10s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as rsp:
        body: bytes = rsp.read()
        return body


def stop(proc: subprocess.Popen[bytes], *, grace: float = 30.0) -> None:
    """SIGTERM, wait for a clean exit, then SIGKILL the whole session (our processes only)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill(-proc.pid)  # the whole session: the process and its handler children
            proc.wait(timeout=10)
    # Handler processes left behind by a crash share the session: end them too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def seed(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE chart_item (id INTEGER PRIMARY KEY, fail BOOLEAN NOT NULL)")
            rows = [{"f": False}] * OK_ITEMS + [{"f": True}] * FAILING_ITEMS
            conn.execute(sa.text("INSERT INTO chart_item (fail) VALUES (:f)"), rows)
    finally:
        engine.dispose()


def samples(metrics_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = get(metrics_url).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a running worker's HTTP port, once it has executed every seeded item."""
    if importlib.util.find_spec("dbworker.pod.cli") is None:
        pytest.skip("dbworker.pod.cli does not exist yet: no `dbworker run` to scrape")
    tmp = tmp_path_factory.mktemp("worker")
    url = f"sqlite:///{tmp / 'app.sqlite'}"
    seed(url)
    port = free_port()
    env = {
        **os.environ,
        "CHART_APP_DATABASE_URL": url,
        "PYTHONPATH": str(REPO),
        "DBWORKER_TERMINATION_LOG": str(tmp / "termination-log"),
    }
    log = (tmp / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbworker", "run", "tests.chart.app:coordinator",
         "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
         "--create-tables", "--backlog-seconds", "1"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        def done() -> bool:
            assert proc.poll() is None, f"worker exited {proc.returncode}: {(tmp / 'worker.log').read_text()[-2000:]}"
            got = samples(f"{base}/metrics")
            finished = got.get(("dbworker_executions_total", (("outcome", "finished"), ("worker", "touch"))), 0)
            failed = got.get(("dbworker_executions_total", (("outcome", "failed"), ("worker", "touch"))), 0)
            return finished >= OK_ITEMS and failed >= FAILING_ITEMS

        wait_until(done, timeout=60, what="the worker to execute every seeded item")
        yield base
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def prometheus(worker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a Prometheus server scraping the worker every second, with the alert rules."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = urllib.parse.urlparse(worker).netloc
    config = {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "dbworker",
                # The labels Kubernetes service discovery would give a worker pod.
                "static_configs": [{"targets": [target], "labels": {"namespace": NAMESPACE, "pod": POD}}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        def scraped() -> bool:
            assert proc.poll() is None, f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}"
            # Enough samples for rate() over RATE_INTERVAL.
            result = query(base, 'count_over_time(dbworker_build_info{job="dbworker"}[1m])')
            return bool(result) and float(result[0]["value"][1]) >= 4

        wait_until(scraped, timeout=60, what="Prometheus to scrape the worker four times")
        yield base
    finally:
        stop(proc)
        log.close()


def api(base: str, path: str, **params: str) -> Any:
    body = json.loads(get(f"{base}{path}?{urllib.parse.urlencode(params)}"))
    assert body["status"] == "success", body
    return body["data"]


def query(base: str, expr: str) -> list[dict[str, Any]]:
    data = api(base, "/api/v1/query", query=expr)
    result: list[dict[str, Any]] = data["result"]
    return result


def used_names() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for q in queries.panel_queries("workers.json") + queries.rule_queries():
        for name in queries.metric_names(q.expr):
            used.setdefault(name, []).append(q.where)
    for where, _label, match in queries.variable_queries("workers.json"):
        for name in queries.metric_names(match or ""):
            used.setdefault(name, []).append(where)
    return used


def test_running_worker_exports_every_name_dashboards_and_rules_read(worker: str) -> None:
    exported = {name for name, _labels in samples(f"{worker}/metrics")}
    unknown = {name: where for name, where in used_names().items() if name not in exported}
    assert not unknown, f"read by dashboards/rules but not on a running worker's /metrics: {unknown}"


def test_prometheus_evaluates_every_worker_panel_with_data(prometheus: str) -> None:
    variables = {"namespace": NAMESPACE, "worker": ".*", "datasource": "prometheus"}
    for q in queries.panel_queries("workers.json"):
        expr = queries.substitute(q.expr, variables, RATE_INTERVAL)
        result = query(prometheus, expr)
        assert result, f"{q.where}: no series for {expr}"


def test_prometheus_evaluates_every_operator_panel(prometheus: str) -> None:
    # No operator runs here: the queries must parse and evaluate; they return nothing.
    variables = {"namespace": NAMESPACE, "datasource": "prometheus"}
    for q in queries.panel_queries("operator.json"):
        query(prometheus, queries.substitute(q.expr, variables, RATE_INTERVAL))


def test_dashboard_variables_list_the_namespace_and_worker(prometheus: str) -> None:
    found: dict[str, set[str]] = {}
    for where, label, match in queries.variable_queries("workers.json"):
        params = {"match[]": queries.substitute(match or "", {"namespace": NAMESPACE}, RATE_INTERVAL)}
        series = api(prometheus, "/api/v1/series", **params)
        found[label] = {s[label] for s in series if label in s}
        assert found[label], f"{where}: no values"
    assert found == {"namespace": {NAMESPACE}, "worker": {"touch", "await"}}


def test_prometheus_evaluates_the_alert_rules_on_live_series(prometheus: str) -> None:
    names = {q.where.removeprefix("alert ") for q in queries.rule_queries()}

    def evaluated() -> list[dict[str, Any]]:
        rules = [r for g in api(prometheus, "/api/v1/rules")["groups"] for r in g["rules"]]
        done = [r for r in rules if not r["lastEvaluation"].startswith("0001-")]
        return rules if len(done) == len(names) else []

    rules = wait_until(evaluated, timeout=30, what="Prometheus to evaluate every alert rule")
    assert {r["name"] for r in rules} == names
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
    # A healthy, idle worker: nothing pending, nothing firing.
    assert api(prometheus, "/api/v1/alerts")["alerts"] == []
