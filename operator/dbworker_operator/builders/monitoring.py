"""The PodMonitor that has the Prometheus Operator scrape a Worker's pods.

Pure. Scrapes the named ``metrics`` port at /metrics; the pods' own labels stay the selector.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds, labels
from dbworker_operator.builders.deployment import METRICS_PORT_NAME
from dbworker_operator.spec import WorkerSpec


def build(spec: WorkerSpec) -> dict[str, Any] | None:
    """The PodMonitor for ``spec``, or None unless ``metrics.podMonitor`` is true."""
    if not spec.pod_monitor:
        return None
    return {
        "apiVersion": kinds.POD_MONITOR.api_version,
        "kind": kinds.POD_MONITOR.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels.common(spec.name)},
        "spec": {
            "selector": {"matchLabels": labels.selector(spec.name)},
            "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
        },
    }
