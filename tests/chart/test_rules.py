"""The worker alert rules: valid for Prometheus (the plain file and the chart's rendered
PrometheusRule), each alert firing and staying quiet in promtool unit tests, and each one
carrying a summary, a locating description and a runbook page that exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.chart.conftest import RULES, RUNBOOKS, all_on, by_kind, objects

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
RULES_TEST = Path(__file__).with_name("rules-test.yaml")
RUNBOOK_PREFIX = "https://github.com/dbworker/dbworker/blob/main/docs/runbooks/"
# The issue's list: each must have an alert.
EXPECTED_ALERTS = {
    "DbworkerFailureRatioHigh",
    "DbworkerBacklogStalled",
    "DbworkerLeasesTakenOver",
    "DbworkerLoopHeartbeatStale",
    "DbworkerDatabaseErrors",
    "DbworkerSlotsSaturated",
}


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


@needs_promtool
def test_promtool_check_rules_accepts_the_file() -> None:
    result = promtool("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


@needs_promtool
def test_promtool_check_rules_accepts_the_rendered_prometheus_rule(chart: helm.Chart, tmp_path: Path) -> None:
    [rule] = by_kind(objects(chart, all_on()), "PrometheusRule")
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    result = promtool("check", "rules", rendered)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_fire_and_stay_quiet() -> None:
    result = promtool("test", "rules", RULES_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_unit_tests_cover_every_alert_both_ways() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert fired == names and quiet == names


def test_the_issue_alerts_are_all_there() -> None:
    assert {a["alert"] for a in alerts()} == EXPECTED_ALERTS


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_alert_has_summary_locating_description_and_runbook(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    # The description names what to look at: the labels the alert is grouped by.
    grouped = re.findall(r"by \(([^)]*)\)", alert["expr"])
    locating = {label.strip() for group in grouped for label in group.split(",")} - {"le"}
    assert {"namespace", "worker"} <= locating
    for label in locating:
        assert f"$labels.{label}" in annotations["description"], label
    url = annotations["runbook_url"]
    assert url == f"{RUNBOOK_PREFIX}{alert['alert']}.md"


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_runbook_page_exists_and_says_what_to_check_and_do(alert: dict[str, Any]) -> None:
    page = RUNBOOKS / f"{alert['alert']}.md"
    assert page.is_file(), f"missing runbook {page}"
    text = page.read_text()
    assert text.startswith(f"# {alert['alert']}")
    for heading in ("## Meaning", "## Check", "## Do"):
        assert heading in text, f"{page.name} lacks {heading!r}"
