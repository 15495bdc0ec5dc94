"""Everything a Worker owns, as one list: which kinds, which are wanted, and the owner reference.

Pure. Optional kinds (KEDA, Prometheus Operator) are built only when the cluster serves them;
a kind the spec no longer asks for maps to None so the handlers delete the leftover.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dbworker_operator.builders import autoscaling, deployment, disruption, monitoring
from dbworker_operator.spec import WorkerSpec


@dataclass(frozen=True)
class Kind:
    """A namespaced kind the operator owns objects of."""

    api_version: str
    kind: str
    plural: str
    optional: bool  # served only when an add-on's CRD is installed


DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments", optional=False)
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", optional=False)
SCALED_OBJECT = Kind(autoscaling.API_VERSION, autoscaling.KIND, "scaledobjects", optional=True)
POD_MONITOR = Kind(monitoring.API_VERSION, monitoring.KIND, "podmonitors", optional=True)
KINDS = (DEPLOYMENT, PDB, SCALED_OBJECT, POD_MONITOR)


@dataclass(frozen=True)
class Capabilities:
    """Which optional kinds the cluster serves (from API discovery)."""

    keda: bool = False
    pod_monitors: bool = False

    def serves(self, kind: Kind) -> bool:
        if kind is SCALED_OBJECT:
            return self.keda
        if kind is POD_MONITOR:
            return self.pod_monitors
        return True


def scaled_by_keda(spec: WorkerSpec, capabilities: Capabilities) -> bool:
    return spec.autoscaling is not None and capabilities.keda


def desired(spec: WorkerSpec, capabilities: Capabilities) -> dict[Kind, dict[str, Any] | None]:
    """Kind -> wanted manifest (None: should not exist) for every kind the cluster serves.

    While KEDA drives the Deployment its replica count is KEDA's, so the manifest leaves it
    out (see ``initial_fields`` for the count a new Deployment starts with).
    """
    replicas = None if scaled_by_keda(spec, capabilities) else spec.replicas
    wanted: dict[Kind, dict[str, Any] | None] = {
        DEPLOYMENT: deployment.build(spec, replicas=replicas),
        PDB: disruption.build(spec),
        SCALED_OBJECT: autoscaling.build(spec),
        POD_MONITOR: monitoring.build(spec),
    }
    return {kind: manifest for kind, manifest in wanted.items() if capabilities.serves(kind)}


def initial_fields(kind: Kind, spec: WorkerSpec, capabilities: Capabilities) -> dict[str, Any]:
    """Fields set only when creating an object, never kept afterwards: a KEDA-scaled
    Deployment starts at the autoscaling minimum, then KEDA owns the count."""
    if kind is DEPLOYMENT and scaled_by_keda(spec, capabilities):
        assert spec.autoscaling is not None  # for type checkers: scaled_by_keda says so
        return {"spec": {"replicas": spec.autoscaling.min_replicas}}
    return {}


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference to a Worker object, so deleting it garbage-collects what it owns."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(manifest: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``manifest`` carrying the owner reference to ``owner``."""
    result = copy.deepcopy(dict(manifest))
    result.setdefault("metadata", {})["ownerReferences"] = [owner_reference(owner)]
    return result
