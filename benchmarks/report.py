"""Turning runs into figures: medians with min-max, ratios against dbworker, targets, chart.

Pure functions over `RunResult` dicts (no I/O except `write_chart`), so the table can be
rebuilt from a saved JSON file: `python -m benchmarks.report benchmarks/results/<run>.json`.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEERS = ("celery", "procrastinate", "pgqueuer")
DBWORKER = "dbworker"


@dataclass(frozen=True)
class Metric:
    """One row of the table: a field of one workload's runs."""

    key: str
    workload: str
    field: str
    label: str
    higher_is_better: bool
    digits: int = 0


METRICS: tuple[Metric, ...] = (
    Metric("drain_noop", "drain_noop", "items_per_s", "drain no-op, items/s", True),
    Metric("drain_steady", "drain_noop", "steady_items_per_s", "  no-op rate after 1st completion", True),
    Metric("drain_first", "drain_noop", "first_done_ms", "  no-op first completion, ms", False, 1),
    Metric("drain_write", "drain_write", "items_per_s", "drain one write, items/s", True),
    Metric("latency_p50", "latency", "latency_p50_ms", "latency p50, ms", False, 1),
    Metric("latency_p99", "latency", "latency_p99_ms", "latency p99, ms", False, 1),
    Metric("enable_p50", "latency_enable", "latency_p50_ms", "enabled row p50, ms", False, 1),
    Metric("enable_p99", "latency_enable", "latency_p99_ms", "enabled row p99, ms", False, 1),
    Metric("dependent_p50", "latency_dependent", "latency_p50_ms", "dependent item p50, ms", False, 1),
    Metric("dependent_p99", "latency_dependent", "latency_p99_ms", "dependent item p99, ms", False, 1),
    Metric("drain_history", "drain_history", "items_per_s", "drain, 100k finished, items/s", True),
    Metric("fanout", "fanout", "items_per_s", "fan-out 4 pods, items/s", True),
    Metric("cpu_noop", "drain_noop", "cpu_ms_per_item", "worker CPU ms/item, no-op", False, 2),
    Metric("cpu_write", "drain_write", "cpu_ms_per_item", "worker CPU ms/item, write", False, 2),
    Metric("dbcpu_noop", "drain_noop", "db_cpu_ms_per_item", "PG backend CPU ms/item, no-op", False, 2),
    Metric("cpu_idle", "latency", "cpu_percent", "worker CPU %/pod, latency phase (idle)", False, 1),
    Metric("conns_noop", "drain_noop", "db_conns_per_pod", "DB connections/pod, no-op", False, 1),
    Metric("conns_write", "drain_write", "db_conns_per_pod", "DB connections/pod, write", False, 1),
    Metric("conns_fanout", "fanout", "db_conns_per_pod", "DB connections/pod, fan-out", False, 1),
    Metric("redis_noop", "drain_noop", "redis_conns_per_pod", "Redis connections/pod, no-op", False, 1),
)
BY_KEY = {m.key: m for m in METRICS}


@dataclass(frozen=True)
class Stat:
    median: float
    low: float
    high: float
    count: int


def stats(runs: Iterable[Mapping[str, Any]], system: str, metric: Metric) -> Stat | None:
    """Median, min and max of ``metric`` over the successful runs of ``system``."""
    values = [
        float(r[metric.field])
        for r in runs
        if r["system"] == system
        and r["workload"] == metric.workload
        and not r.get("error")
        and r.get(metric.field) is not None
    ]
    if not values:
        return None
    return Stat(statistics.median(values), min(values), max(values), len(values))


def advantage(dbw: Stat | None, peer: Stat | None, metric: Metric) -> float | None:
    """How many times better dbworker's median is (> 1: dbworker better)."""
    if dbw is None or peer is None:
        return None
    num, den = (dbw.median, peer.median) if metric.higher_is_better else (peer.median, dbw.median)
    if den == 0:
        return None
    return num / den


def summarize(runs: Sequence[Mapping[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    """Every metric's stats per system, and dbworker's advantage over each peer."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        per_system = {s: stats(runs, s, metric) for s in systems}
        out[metric.key] = {
            "label": metric.label,
            "higher_is_better": metric.higher_is_better,
            "systems": {s: (vars(v) if v else None) for s, v in per_system.items()},
            "dbworker_advantage": {
                p: advantage(per_system.get(DBWORKER), per_system.get(p), metric)
                for p in systems
                if p in PEERS
            },
        }
    for system in systems:
        drain = stats(runs, system, BY_KEY["drain_noop"])
        hist = stats(runs, system, BY_KEY["drain_history"])
        out.setdefault("history_ratio", {})[system] = (
            hist.median / drain.median if drain and hist and drain.median else None
        )
    return out


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def _cell(stat: Stat | None, digits: int) -> str:
    if stat is None:
        return "n/a"
    if stat.count == 1:
        return _fmt(stat.median, digits)
    return f"{_fmt(stat.median, digits)} ({_fmt(stat.low, digits)}-{_fmt(stat.high, digits)})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        lines.append(
            "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        )
    return "\n".join(lines)


def on_postgresql(system: str) -> bool:
    """Peers, and dbworker's configurations on PostgreSQL (`dbworker`, `dbworker-trigger`, ...)."""
    if system in PEERS:
        return True
    return system.startswith(DBWORKER) and "sqlite" not in system and "mariadb" not in system


LATENCY_CASES = (("new row", "latency"), ("enabled row", "latency_enable"),
                 ("dependent", "latency_dependent"))  # fmt: skip


def latency_table(runs: Sequence[Mapping[str, Any]], systems: Sequence[str]) -> str | None:
    """p50 / p99 per system and configuration, one column per pick-up case (medians)."""
    cases = [(label, w) for label, w in LATENCY_CASES if any(r["workload"] == w for r in runs)]
    if not cases:
        return None
    rows = []
    for system in systems:
        cells = []
        for _, workload in cases:
            p50 = stats(runs, system, Metric("", workload, "latency_p50_ms", "", False))
            p99 = stats(runs, system, Metric("", workload, "latency_p99_ms", "", False))
            cells.append("-" if p50 is None or p99 is None
                         else f"{p50.median:,.1f} / {p99.median:,.1f}")  # fmt: skip
        if any(c != "-" for c in cells):
            rows.append([system, *cells])
    header = ["system", *[f"{label} p50 / p99 ms" for label, _ in cases]]
    return _table(header, rows)


def issue15_targets(runs: Sequence[Mapping[str, Any]], systems: Sequence[str]) -> list[list[str]]:
    """Issue 15's pick-up targets for dbworker's default configuration on each database."""
    rows: list[list[str]] = []

    def med(system: str, key: str) -> float | None:
        st = stats(runs, system, BY_KEY[key])
        return st.median if st else None

    peers = [p for p in PEERS if p in systems]
    for key, label in (("latency_p50", "p50"), ("latency_p99", "p99")):
        mine = med(DBWORKER, key)
        found = [(v, p) for p in peers if (v := med(p, key)) is not None]
        if mine is None or not found:
            continue
        best_v, best_p = min(found)
        rows.append([f"PostgreSQL default, new row {label} <= best peer", _fmt(mine, 1),
                     f"{best_v:.1f} ({best_p})", "met" if mine <= best_v else "NOT met"])  # fmt: skip
    maria = f"{DBWORKER}-mariadb"
    for key, limit in (("latency_p50", 20.0), ("latency_p99", 100.0)):
        mine = med(maria, key)
        if mine is not None:
            rows.append([f"MariaDB default, new row {key[-3:]} <= {limit:.0f} ms", _fmt(mine, 1),
                         "-", "met" if mine <= limit else "NOT met"])  # fmt: skip
    lite = med(f"{DBWORKER}-sqlite", "latency_p50")
    if lite is not None:
        rows.append(["SQLite default, new row p50 ~3 ms (<= 4)", _fmt(lite, 1), "-",
                     "met" if lite <= 4.0 else "NOT met"])  # fmt: skip
    # "As fast as a new row": within 1.5x of the new row's p50 and p99 (and 2 ms), per database.
    for system in (DBWORKER, f"{DBWORKER}-mariadb", f"{DBWORKER}-sqlite"):
        for case, prefix in (("enabled row", "enable"), ("dependent", "dependent")):
            for pct in ("p50", "p99"):
                new = med(system, f"latency_{pct}")
                got = med(system, f"{prefix}_{pct}")
                if new is None or got is None:
                    continue
                met = got <= max(1.5 * new, new + 2.0)
                rows.append([f"{system}: {case} {pct} ~ new row's", _fmt(got, 1),
                             f"{new:.1f} (new row)", "met" if met else "NOT met"])  # fmt: skip
    return rows


def render(runs: Sequence[Mapping[str, Any]], systems: Sequence[str]) -> str:
    """The printed report: side-by-side table, ratios, targets, dbworker per database."""
    pg_systems = [s for s in systems if on_postgresql(s)]
    other_dbw = [s for s in systems if s.startswith(DBWORKER) and not on_postgresql(s)]
    parts: list[str] = []

    measured = [m for m in METRICS if any(r["workload"] == m.workload for r in runs)]
    rows = []
    for metric in measured:
        rows.append(
            [metric.label] + [_cell(stats(runs, s, metric), metric.digits) for s in pg_systems]
        )
    summary = summarize(runs, systems)
    with_history = any(r["workload"] == "drain_history" for r in runs)
    if with_history:
        rows.append(
            ["history ratio (100k / 0)"]
            + [_fmt(summary["history_ratio"].get(s), 2) for s in pg_systems]
        )
    parts.append("PostgreSQL, side by side: median (min-max) over repeats")
    parts.append(_table(["metric", *pg_systems], rows))

    peers = [s for s in pg_systems if s in PEERS]
    if DBWORKER in pg_systems and peers:
        ratio_rows = []
        for metric in measured:
            adv = summary[metric.key]["dbworker_advantage"]
            ratio_rows.append(
                [metric.label] + [_ratio(adv.get(p)) for p in peers]
            )
        parts.append("")
        parts.append("dbworker's advantage over each peer (medians; > 1 means dbworker is better)")
        parts.append(_table(["metric", *peers], ratio_rows))
        parts.append("")
        parts.append("Issue 7 targets")
        parts.append(_table(["target", "dbworker", "best peer", "verdict"], targets(runs, peers)))

    lat = latency_table(runs, systems)
    if lat:
        parts.append("")
        parts.append("Pick-up latency per system and configuration: p50 / p99 ms, medians over "
                     "repeats (new row: insert's commit; enabled row: UPDATE's commit; dependent: "
                     "dependency's handler end; each to the handler's first line)")  # fmt: skip
        parts.append(lat)
        rows15 = issue15_targets(runs, systems)
        if rows15:
            parts.append("")
            parts.append("Issue 15 pick-up targets (default configuration)")
            parts.append(_table(["target", "dbworker", "reference", "verdict"], rows15))

    if other_dbw:
        dbw_cols = [s for s in [DBWORKER, *other_dbw] if s in systems]
        dbw_rows = []
        for metric in measured:
            if metric.key.startswith("redis"):
                continue
            dbw_rows.append(
                [metric.label] + [_cell(stats(runs, s, metric), metric.digits) for s in dbw_cols]
            )
        if with_history:
            dbw_rows.append(
                ["history ratio (100k / 0)"]
                + [_fmt(summary["history_ratio"].get(s), 2) for s in dbw_cols]
            )
        parts.append("")
        parts.append("dbworker per database: median (min-max)")
        parts.append(_table(["metric", *dbw_cols], dbw_rows))

    partial = [r for r in runs if r.get("partial") and not r.get("error")]
    if partial:
        parts.append("")
        parts.append(f"{len(partial)} drain(s) hit the time budget (their rate counts the items done):")
        for r in partial:
            parts.append(f"  {r['system']} {r['workload']} repeat {r['repeat']}: {r.get('note')}")
    versions = sorted({str(r["library"]) for r in runs if r.get("library")})
    if len(versions) > 1:
        parts.append("")
        parts.append(f"WARNING: dbworker's source changed during this run ({', '.join(versions)}): "
                     "its figures mix versions; run again.")  # fmt: skip
    failed = [r for r in runs if r.get("error")]
    if failed:
        parts.append("")
        parts.append(f"{len(failed)} run(s) failed (left out of the figures):")
        for r in failed:
            first = str(r["error"]).splitlines()[0]
            parts.append(f"  {r['system']} {r['workload']} repeat {r['repeat']}: {first}")
    return "\n".join(parts)


def targets(runs: Sequence[Mapping[str, Any]], peers: Sequence[str]) -> list[list[str]]:
    """Each issue 7 target: dbworker's figure, the best peer's, and whether it is met."""
    rows: list[list[str]] = []

    def best(metric: Metric) -> tuple[str, Stat] | None:
        found = [(p, s) for p in peers if (s := stats(runs, p, metric)) is not None]
        if not found:
            return None
        pick = max if metric.higher_is_better else min
        return pick(found, key=lambda ps: ps[1].median)

    def compare(key: str, factor: float, label: str) -> None:
        metric = BY_KEY[key]
        dbw = stats(runs, DBWORKER, metric)
        top = best(metric)
        if dbw is None or top is None:
            rows.append([label, _cell(dbw, metric.digits), "-", "not measured"])
            return
        name, stat = top
        if metric.higher_is_better:
            met = dbw.median >= factor * stat.median
        else:
            met = dbw.median <= factor * stat.median
        rows.append(
            [
                label,
                _fmt(dbw.median, metric.digits),
                f"{_fmt(stat.median, metric.digits)} ({name})",
                "met" if met else "NOT met",
            ]
        )

    compare("drain_noop", 1.2, "drain no-op >= 1.2x best peer")
    compare("drain_write", 1.2, "drain one write >= 1.2x best peer")
    compare("latency_p50", 1.0, "latency p50 <= best peer")
    compare("latency_p99", 1.0, "latency p99 <= best peer")
    compare("cpu_noop", 1.0, "worker CPU/item (no-op) <= best peer")
    compare("cpu_write", 1.0, "worker CPU/item (write) <= best peer")
    compare("conns_write", 1.0, "DB connections/pod (write) <= best peer")
    drain = stats(runs, DBWORKER, BY_KEY["drain_noop"])
    hist = stats(runs, DBWORKER, BY_KEY["drain_history"])
    if drain and hist and drain.median:
        ratio = hist.median / drain.median
        rows.append(
            ["drain with 100k history >= 0.9x without", f"{ratio:.2f}x", "-",
             "met" if ratio >= 0.9 else "NOT met"]
        )  # fmt: skip
    else:
        rows.append(["drain with 100k history >= 0.9x without", "-", "-", "not measured"])
    return rows


def write_chart(runs: Sequence[Mapping[str, Any]], systems: Sequence[str], path: Path) -> None:
    """A PNG: one panel per headline metric, a bar per system, min-max as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        "drain_noop", "drain_write", "drain_history", "fanout",
        "latency_p50", "latency_p99", "cpu_noop", "dbcpu_noop",
    ]  # fmt: skip
    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    colors = {
        "dbworker": "#1f77b4", "celery": "#2ca02c", "procrastinate": "#ff7f0e",
        "pgqueuer": "#9467bd", "dbworker-sqlite": "#aec7e8", "dbworker-mariadb": "#6baed6",
    }  # fmt: skip
    for ax, key in zip(axes.flat, keys, strict=True):
        metric = BY_KEY[key]
        names, medians, lows, highs = [], [], [], []
        for system in systems:
            stat = stats(runs, system, metric)
            if stat is None:
                continue
            names.append(system)
            medians.append(stat.median)
            lows.append(stat.median - stat.low)
            highs.append(stat.high - stat.median)
        ax.bar(
            range(len(names)),
            medians,
            yerr=[lows, highs],
            capsize=4,
            color=[colors.get(n, "#7f7f7f") for n in names],
        )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        better = "higher is better" if metric.higher_is_better else "lower is better"
        ax.set_title(f"{metric.label}\n({better})", fontsize=9)
        if key.startswith("latency"):
            ax.set_yscale("log")
    fig.suptitle("dbworker vs Celery+Redis, procrastinate, PgQueuer (concurrency 2; medians, min-max)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """Re-print the table of a saved run: python -m benchmarks.report RESULTS.json"""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.report benchmarks/results/<run>.json")
    data = json.loads(Path(sys.argv[1]).read_text())
    print(render(data["runs"], data["config"]["systems"]))


if __name__ == "__main__":
    main()
