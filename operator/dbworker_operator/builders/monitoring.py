"""The PodMonitor that has the Prometheus Operator scrape a Worker's pods.

Pure. Scrapes the named ``metrics`` port at /metrics; the pods' own labels stay the selector
and are carried into the series (``podTargetLabels``), so KEDA's query (autoscaling.py) can
pick the Worker's pods by label. Its own labels are what a Prometheus's ``podMonitorSelector``
reads (kube-prometheus-stack selects ``release: <its release>`` by default).
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
        "metadata": {"name": spec.name, "namespace": spec.namespace,
                     "labels": {**spec.pod_monitor_labels, **labels.common(spec.name)}},
        "spec": {
            "selector": {"matchLabels": labels.selector(spec.name)},
            "podTargetLabels": sorted(labels.selector(spec.name)),
            "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
        },
    }
