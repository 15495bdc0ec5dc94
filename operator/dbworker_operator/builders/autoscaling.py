"""The KEDA ScaledObject that scales a Worker's Deployment on the workers' backlog.

Pure. KEDA asks Prometheus for the backlog: every pod reports the same database-wide
``dbworker_backlog{worker}``, so the query takes the max over pods and sums over workers.
Pods are picked by their selector labels, which the PodMonitor (monitoring.py) carries into
the series as ``app_kubernetes_io_name`` and ``app_kubernetes_io_instance`` (the names the
Prometheus Operator and Prometheus's own ``labelmap`` of pod labels both give them), never by
pod name: Kubernetes truncates long generated pod names, and a name prefix matches other Workers.
"""

from __future__ import annotations

import re
from typing import Any

from dbworker_operator import kinds, labels
from dbworker_operator.spec import WorkerSpec


def series_label(label: str) -> str:
    """The Prometheus label name a pod label becomes (invalid characters turn into ``_``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def backlog_query(spec: WorkerSpec) -> str:
    """PromQL for the Worker's backlog: its pods' series, matched exactly by their selector labels."""
    matchers = [f'namespace="{spec.namespace}"',
                *(f'{series_label(k)}="{v}"' for k, v in sorted(labels.selector(spec.name).items()))]
    return f"sum(max by (worker) (dbworker_backlog{{{','.join(matchers)}}})) or vector(0)"


def build(spec: WorkerSpec) -> dict[str, Any] | None:
    """The ScaledObject for ``spec``, or None when the spec asks for no autoscaling."""
    if spec.autoscaling is None:
        return None
    scaling = spec.autoscaling
    return {
        "apiVersion": kinds.SCALED_OBJECT.api_version,
        "kind": kinds.SCALED_OBJECT.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels.common(spec.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": kinds.DEPLOYMENT.api_version, "kind": kinds.DEPLOYMENT.kind,
                               "name": spec.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": 15,
            # Scale in slowly: draining pods finish their handlers, so churn is costly.
            "cooldownPeriod": 300,
            "triggers": [{
                "type": "prometheus",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": scaling.prometheus_address,
                    "query": backlog_query(spec),
                    "threshold": str(scaling.target_backlog_per_replica),
                },
            }],
        },
    }
