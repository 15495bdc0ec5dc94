"""Checks of the benchmark's pure parts: percentiles, summaries, ratios, targets, options.

No server and no worker process: `.venv/bin/python -m pytest benchmarks/test_report.py`.
Speeds are never asserted here; only how figures are combined and printed.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import report, run, workloads


def _run(system: str, workload: str, repeat: int, **figures: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"system": system, "workload": workload, "repeat": repeat, "error": None}
    return {**base, **figures}


RUNS = [
    _run("dbworker", "drain_noop", 0, items_per_s=1200.0, cpu_ms_per_item=0.5),
    _run("dbworker", "drain_noop", 1, items_per_s=1000.0, cpu_ms_per_item=0.7),
    _run("dbworker", "drain_noop", 2, items_per_s=1100.0, cpu_ms_per_item=0.6),
    _run("dbworker", "drain_history", 0, items_per_s=990.0),
    _run("dbworker", "latency", 0, latency_p50_ms=2.0, latency_p99_ms=9.0),
    _run("celery", "drain_noop", 0, items_per_s=800.0, cpu_ms_per_item=0.66),
    _run("celery", "drain_noop", 1, items_per_s=None, error="RuntimeError: boom"),
    _run("celery", "latency", 0, latency_p50_ms=1.0, latency_p99_ms=4.0),
    _run("pgqueuer", "drain_noop", 0, items_per_s=900.0, cpu_ms_per_item=0.2),
]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert workloads.percentile(values, 50) == 50.0
    assert workloads.percentile(values, 99) == 99.0
    assert workloads.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        workloads.percentile([], 50)


def test_stats_skip_failed_runs_and_take_median_min_max() -> None:
    stat = report.stats(RUNS, "dbworker", report.BY_KEY["drain_noop"])
    assert stat == report.Stat(median=1100.0, low=1000.0, high=1200.0, count=3)
    celery = report.stats(RUNS, "celery", report.BY_KEY["drain_noop"])
    assert celery is not None and celery.count == 1
    assert report.stats(RUNS, "procrastinate", report.BY_KEY["drain_noop"]) is None


def test_advantage_is_above_one_when_dbworker_is_better_either_way() -> None:
    dbw = report.Stat(100.0, 100.0, 100.0, 1)
    peer = report.Stat(50.0, 50.0, 50.0, 1)
    assert report.advantage(dbw, peer, report.BY_KEY["drain_noop"]) == 2.0
    assert report.advantage(dbw, peer, report.BY_KEY["latency_p50"]) == 0.5
    assert report.advantage(None, peer, report.BY_KEY["drain_noop"]) is None


def test_targets_compare_with_the_best_peer() -> None:
    rows = {row[0]: row for row in report.targets(RUNS, ["celery", "pgqueuer"])}
    noop = rows["drain no-op >= 1.2x best peer"]
    assert noop[2] == "900 (pgqueuer)" and noop[3] == "met"  # 1100 >= 1.2 * 900
    assert rows["latency p50 <= best peer"][3] == "NOT met"
    assert rows["drain with 100k history >= 0.9x without"][1] == "0.90x"
    assert rows["drain one write >= 1.2x best peer"][3] == "not measured"


def test_render_lists_failures_and_every_system() -> None:
    text = report.render(RUNS, ["dbworker", "celery", "pgqueuer"])
    assert "| dbworker" in text.splitlines()[1] or "dbworker" in text.splitlines()[1]
    assert "celery drain_noop repeat 1: RuntimeError: boom" in text
    assert "Issue 7 targets" in text


def test_options_have_quick_defaults_and_name_bad_values() -> None:
    args = run.parse_args(["--quick"])
    assert (args.items, args.latency_items, args.repeats) == (500, 20, 2)
    with pytest.raises(SystemExit):
        run.parse_args(["--systems", "dbworker,rq"])
    with pytest.raises(SystemExit):
        run.parse_args(["--items", "0"])


LATENCY_RUNS = [
    _run("dbworker", "latency", 0, latency_p50_ms=3.0, latency_p99_ms=5.0),
    _run("dbworker-trigger", "latency", 0, latency_p50_ms=2.5, latency_p99_ms=4.0),
    _run("dbworker-no-triggers", "latency", 0, latency_p50_ms=150.0, latency_p99_ms=400.0),
    _run("dbworker", "latency_enable", 0, latency_p50_ms=3.5, latency_p99_ms=30.0),
    _run("dbworker", "latency_dependent", 0, latency_p50_ms=4.0, latency_p99_ms=6.0),
    _run("dbworker-mariadb", "latency", 0, latency_p50_ms=12.0, latency_p99_ms=150.0),
    _run("celery", "latency", 0, latency_p50_ms=2.0, latency_p99_ms=6.0),
]
LATENCY_SYSTEMS = ["dbworker", "dbworker-no-triggers", "dbworker-trigger", "dbworker-mariadb",
                   "celery"]  # fmt: skip


def test_dbworker_configurations_sit_beside_the_peers_on_postgresql() -> None:
    assert report.on_postgresql("dbworker-no-triggers") and report.on_postgresql("celery")
    assert not report.on_postgresql("dbworker-mariadb")
    assert not report.on_postgresql("dbworker-sqlite-no-triggers")
    text = report.render(LATENCY_RUNS, LATENCY_SYSTEMS)
    side_by_side = text.split("\n\n")[0].splitlines()[1]
    assert "dbworker-no-triggers" in side_by_side and "dbworker-mariadb" not in side_by_side
    assert "| dbworker-no-triggers | 150.0 / 400.0" in text
    assert "drain no-op" not in text.split("\n\n")[0]  # not measured: no row


def test_issue15_targets() -> None:
    rows = {row[0]: row for row in report.issue15_targets(LATENCY_RUNS, LATENCY_SYSTEMS)}
    assert rows["PostgreSQL default, new row p50 <= best peer"][3] == "NOT met"  # 3.0 > 2.0
    assert rows["PostgreSQL default, new row p99 <= best peer"][3] == "met"  # 5.0 <= 6.0
    assert rows["MariaDB default, new row p50 <= 20 ms"][3] == "met"
    assert rows["MariaDB default, new row p99 <= 100 ms"][3] == "NOT met"
    assert rows["dbworker: enabled row p50 ~ new row's"][3] == "met"
    assert rows["dbworker: enabled row p99 ~ new row's"][3] == "NOT met"


def test_dbworker_configurations_are_systems_of_their_own() -> None:
    args = run.parse_args(["--quick", "--workloads", "latency-all", "--dbworker-databases",
                           "postgresql,mariadb"])  # fmt: skip
    assert args.workloads == "latency,latency_enable,latency_dependent"
    names = [s.name for s in run.build_systems(args)]
    assert names[:4] == ["dbworker", "dbworker-no-triggers", "dbworker-trigger", "dbworker-mariadb"]
    assert run.parse_args(["--no-notify-trigger"]).dbworker_configs == "no-triggers"
    with pytest.raises(SystemExit):
        run.parse_args(["--dbworker-configs", "notify"])
