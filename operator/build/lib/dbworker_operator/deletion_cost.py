"""The pod-deletion-cost annotation: busy pods cost more to delete, so scale-in takes idle ones.

Pure. Kubernetes removes pods with the lowest ``controller.kubernetes.io/pod-deletion-cost``
first (after unready ones), so the cost is simply the handlers a pod is running.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dbworker_operator import labels


def cost(handlers_active: float) -> str:
    """The annotation value for a pod running ``handlers_active`` handlers."""
    return str(max(0, round(handlers_active)))


def patch_for(pod: Mapping[str, Any], handlers_active: float) -> dict[str, Any] | None:
    """The merge patch that sets the pod's cost, or None when it is already right."""
    wanted = cost(handlers_active)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(labels.DELETION_COST) == wanted:
        return None
    return {"metadata": {"annotations": {labels.DELETION_COST: wanted}}}
