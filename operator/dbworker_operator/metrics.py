"""The operator's own Prometheus series: reconciles, their errors and durations, pods scraped.

Built on a registry passed in (never the global one), so tests read a fresh registry.
Labels are bounded: ``kind`` is one of the reconcile kinds below, ``result`` ok|error.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# What triggered a reconcile: kopf's change causes, an owned Deployment's event, the resync loop.
RECONCILE_KINDS = ("create", "update", "resume", "deployment", "resync")
RESULTS = ("ok", "error")


@dataclass(frozen=True)
class OperatorMetrics:
    reconciles: Counter
    reconcile_duration: Histogram
    objects_applied: Counter
    scrape_failures: Counter
    resync_passes: Counter
    workers: Gauge
    degraded: Gauge


def build(registry: CollectorRegistry) -> OperatorMetrics:
    """Every operator series on ``registry``, each known label set touched so it starts at zero."""
    m = OperatorMetrics(
        reconciles=Counter("dbworker_operator_reconciles_total", "Worker reconciles by trigger and result.",
                           ["kind", "result"], registry=registry),
        reconcile_duration=Histogram("dbworker_operator_reconcile_duration_seconds",
                                     "Time one Worker reconcile took.", ["kind"], registry=registry,
                                     buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)),
        objects_applied=Counter("dbworker_operator_objects_applied_total",
                                "Owned objects created, updated or deleted to match a Worker.",
                                ["action"], registry=registry),
        scrape_failures=Counter("dbworker_operator_pod_scrape_failures_total",
                                "Worker pods whose /metrics did not answer.", registry=registry),
        resync_passes=Counter("dbworker_operator_resync_passes_total",
                              "Completed passes of the periodic resync (paused replicas count passes too).",
                              registry=registry),
        workers=Gauge("dbworker_operator_workers", "Worker objects reconciled by this operator.",
                      registry=registry),
        degraded=Gauge("dbworker_operator_workers_degraded", "Worker objects whose Degraded condition is True.",
                       registry=registry),
    )
    for kind in RECONCILE_KINDS:
        m.reconcile_duration.labels(kind)
        for result in RESULTS:
            m.reconciles.labels(kind, result)
    for action in ("created", "updated", "deleted"):
        m.objects_applied.labels(action)
    return m
