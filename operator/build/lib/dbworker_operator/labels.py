"""The app.kubernetes.io/* labels on everything the operator owns, and the stable selector.

The selector holds only name and instance: a Deployment's selector is immutable, so it must
never depend on anything a spec change could alter (image, version, workers).
"""

from __future__ import annotations

NAME = "dbworker"
MANAGED_BY = "dbworker-operator"
COMPONENT = "worker"
# Annotation on worker pods that Kubernetes reads when choosing which pods to remove first.
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def selector(worker: str) -> dict[str, str]:
    """The pod selector of a Worker's Deployment (and PDB, PodMonitor): stable across updates."""
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": worker}


def selector_string(worker: str) -> str:
    """``selector(worker)`` in the ``k=v,k=v`` form of a label selector query and ``status.selector``."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector(worker).items()))


def common(worker: str) -> dict[str, str]:
    """Labels for every object the operator creates for ``worker``."""
    return {
        **selector(worker),
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": NAME,
    }
