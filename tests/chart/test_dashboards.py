"""The Grafana dashboards: the panels and variables the issue asks for, data-source
variables on every query, and every metric name in a dashboard or rule exported by the
library's own metrics module (and the operator's), read from fresh registries.

The same names are checked against a running worker's /metrics in test_live_metrics.py.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.chart import queries


def registry_names(registry: CollectorRegistry) -> set[str]:
    return {sample.name for family in registry.collect() for sample in family.samples}


def library_names() -> set[str]:
    from dbworker.pod import metrics

    registry = CollectorRegistry()
    worker_metrics = metrics.WorkerMetrics(registry, version="test")
    worker_metrics.touch(["touch"], dialect="sqlite", slots={"touch": 1}, processes={"touch": 1})
    return registry_names(registry)


def operator_names() -> set[str]:
    if importlib.util.find_spec("dbworker_operator") is None:
        pytest.skip("dbworker_operator is not installed (pip install -e ./operator)")
    from dbworker_operator import metrics as operator_metrics

    registry = CollectorRegistry()
    operator_metrics.build(registry)
    return registry_names(registry)


def test_workers_dashboard_has_the_panels_the_issue_asks_for() -> None:
    board = queries.dashboards()["workers.json"]
    titles = {p["title"] for p in queries.panels(board)}
    for wanted in (
        "Throughput by outcome",
        "Failure ratio",
        "Handler duration",
        "Claim latency",
        "Handlers active vs slots",
        "Slot utilisation",
        "Backlog",
        "Leases taken over",
        "Database errors",
        "Draining pods",
    ):
        assert wanted in titles
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in queries.panels(board)}
    assert "histogram_quantile" in exprs["Handler duration"]
    assert "dbworker_handler_duration_seconds_bucket" in exprs["Handler duration"]
    assert "histogram_quantile" in exprs["Claim latency"]


def test_operator_dashboard_shows_reconciles_errors_and_duration() -> None:
    board = queries.dashboards()["operator.json"]
    titles = {p["title"] for p in queries.panels(board)}
    assert {"Reconciles by trigger and result", "Reconcile errors", "Reconcile duration"} <= titles


@pytest.mark.parametrize("name", ["workers.json", "operator.json"])
def test_dashboard_variables_and_datasource(name: str) -> None:
    board = queries.dashboards()[name]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["type"] == "query"
    if name == "workers.json":
        assert variables["worker"]["type"] == "query"
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] == "${datasource}"
    for panel in queries.panels(board):
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], (panel["title"], target["expr"])
    assert board["uid"] and board["title"].startswith("dbworker / ")
    ids = [p["id"] for p in queries.all_panels(board["panels"])]
    assert len(ids) == len(set(ids))


def test_worker_panels_follow_the_worker_variable() -> None:
    for query in queries.panel_queries("workers.json"):
        # dbworker_draining and dbworker_build_info are per process, without a worker label.
        if queries.metric_names(query.expr) <= {"dbworker_draining", "dbworker_build_info"}:
            continue
        assert 'worker=~"$worker"' in query.expr, query


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.9, sum by (le, worker) (rate(a_bucket{x=~"$y", le!="1"}[$__rate_interval]))) / on (worker) b and time() - c offset 5m'
    assert queries.metric_names(expr) == {"a_bucket", "b", "c"}


def test_every_name_in_dashboards_and_rules_is_exported_by_the_library() -> None:
    exported = library_names()
    operator = {n for q in queries.panel_queries("operator.json") for n in queries.metric_names(q.expr)}
    used: dict[str, list[str]] = {}
    for query in queries.panel_queries("workers.json") + queries.rule_queries():
        names = queries.metric_names(query.expr)
        assert names, f"{query.where} reads no metric"
        for name in names:
            used.setdefault(name, []).append(query.where)
    for where, _label, match in queries.variable_queries("workers.json"):
        assert match is not None
        for name in queries.metric_names(match):
            used.setdefault(name, []).append(where)
    unknown = {name: wheres for name, wheres in used.items() if name not in exported}
    assert not unknown, f"not exported by dbworker.pod.metrics: {unknown}"
    assert not operator & exported


def test_every_name_in_the_operator_dashboard_is_exported_by_the_operator() -> None:
    exported = operator_names()
    used: dict[str, Any] = {}
    for query in queries.panel_queries("operator.json"):
        for name in queries.metric_names(query.expr):
            used.setdefault(name, []).append(query.where)
    for where, _label, match in queries.variable_queries("operator.json"):
        for name in queries.metric_names(match or ""):
            used.setdefault(name, []).append(where)
    unknown = {name: wheres for name, wheres in used.items() if name not in exported}
    assert not unknown, f"not exported by dbworker_operator.metrics: {unknown}"
