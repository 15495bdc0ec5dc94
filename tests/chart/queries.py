"""The PromQL the chart ships, as data: every dashboard panel's and variable's query, every
alert's expression, and the metric names each one reads.

Used by test_dashboards.py (names against the libraries' registries) and
test_live_metrics.py (names against a running worker; queries through a real Prometheus).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tests.chart.conftest import DASHBOARDS, RULES

# PromQL words that look like metric names but are not.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "inf", "nan"}
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<match>.+),\s*)?(?P<label>[A-Za-z_][A-Za-z0-9_]*)\)$")


@dataclass(frozen=True)
class Query:
    where: str  # "workers.json: Throughput by outcome" or "alert DbworkerBacklogStalled"
    expr: str


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS}


def all_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in panels:
        out.append(panel)
        out.extend(all_panels(panel.get("panels", [])))  # collapsed rows hold their panels
    return out


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]


def panel_queries(name: str | None = None) -> list[Query]:
    out = []
    for file, board in dashboards().items():
        if name is not None and file != name:
            continue
        for panel in panels(board):
            for target in panel["targets"]:
                out.append(Query(f"{file}: {panel['title']} [{target['refId']}]", target["expr"]))
    return out


def variable_queries(name: str | None = None) -> list[tuple[str, str, str | None]]:
    """(where, label, series selector or None) of every label_values() variable."""
    out = []
    for file, board in dashboards().items():
        if name is not None and file != name:
            continue
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = LABEL_VALUES.match(var["definition"])
            assert m, f"{file}: variable {var['name']} is not a label_values() query"
            out.append((f"{file}: ${var['name']}", m.group("label"), m.group("match")))
    return out


def rule_queries() -> list[Query]:
    doc = yaml.safe_load(RULES.read_text())
    return [
        Query(f"alert {rule.get('alert') or rule.get('record')}", rule["expr"])
        for group in doc["groups"]
        for rule in group["rules"]
    ]


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (identifiers that are neither functions nor keywords)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", e):
        token = m.group(0)
        if e[m.end():].lstrip().startswith("(") or token.lower() in KEYWORDS:
            continue
        names.add(token)
    return names


def substitute(expr: str, variables: dict[str, str], rate_interval: str) -> str:
    """Grafana's variables replaced the way Grafana would before sending the query."""
    out = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    for name, value in variables.items():
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in out, f"unsubstituted variable in {out!r}"
    return out
