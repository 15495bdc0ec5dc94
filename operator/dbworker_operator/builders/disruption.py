"""The PodDisruptionBudget that limits voluntary evictions of a Worker's pods.

Pure. Unhealthy pods may always be evicted, so a crash-looping fleet never blocks a node drain,
on servers that have that policy (Kubernetes 1.27+, see kinds.Capabilities); older servers
would drop the field, so it is not sent to them.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds, labels
from dbworker_operator.spec import WorkerSpec


def build(spec: WorkerSpec, capabilities: kinds.Capabilities) -> dict[str, Any] | None:
    """The PDB for ``spec``, or None when ``disruptionBudget`` is unset."""
    budget = spec.disruption_budget
    if budget is None:
        return None
    pdb_spec: dict[str, Any] = {"selector": {"matchLabels": labels.selector(spec.name)}}
    if capabilities.unhealthy_pod_eviction_policy:
        pdb_spec["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    if budget.min_available is not None:
        pdb_spec["minAvailable"] = budget.min_available
    else:
        pdb_spec["maxUnavailable"] = budget.max_unavailable
    return {
        "apiVersion": kinds.PDB.api_version,
        "kind": kinds.PDB.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels.common(spec.name)},
        "spec": pdb_spec,
    }
