"""Everything a Worker owns, as one list: which objects are wanted, and the owner reference.

Pure. The kinds themselves are in kinds.py. Optional kinds (KEDA, Prometheus Operator) are
built only when the cluster serves them; a kind the spec no longer asks for maps to None so
the handlers delete the leftover.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dbworker_operator import budget, kinds
from dbworker_operator.builders import autoscaling, console, deployment, disruption, monitoring
from dbworker_operator.spec import WorkerSpec


def scaled_by_keda(spec: WorkerSpec, capabilities: kinds.Capabilities) -> bool:
    return spec.autoscaling is not None and capabilities.keda


def monitored(spec: WorkerSpec, capabilities: kinds.Capabilities) -> bool:
    """Whether a PodMonitor scrapes the Worker's pods."""
    return spec.pod_monitor and capabilities.pod_monitors


def desired(spec: WorkerSpec, capabilities: kinds.Capabilities) -> dict[kinds.Kind, dict[str, Any] | None]:
    """Kind -> wanted manifest (None: should not exist) for every kind the cluster serves.

    While KEDA drives the Deployment its replica count is KEDA's, so the manifest leaves it
    out (see ``initial_fields`` for the count a new Deployment starts with).
    """
    replicas = None if scaled_by_keda(spec, capabilities) else spec.replicas
    wanted: dict[kinds.Kind, dict[str, Any] | None] = {
        kinds.DEPLOYMENT: deployment.build(spec, replicas=replicas, pod_monitor=monitored(spec, capabilities)),
        kinds.PDB: disruption.build(spec, capabilities),
        kinds.SCALED_OBJECT: autoscaling.build(spec),
        kinds.TRIGGER_AUTHENTICATION: autoscaling.build_trigger_authentication(spec),
        kinds.POD_MONITOR: monitoring.build(spec),
    }
    return {kind: manifest for kind, manifest in wanted.items() if capabilities.serves(kind)}


def initial_fields(kind: kinds.Kind, spec: WorkerSpec, capabilities: kinds.Capabilities) -> dict[str, Any]:
    """Fields set only when creating an object, never kept afterwards: a KEDA-scaled
    Deployment starts at the autoscaling minimum, then KEDA owns the count."""
    if kind is kinds.DEPLOYMENT and scaled_by_keda(spec, capabilities):
        assert spec.autoscaling is not None  # for type checkers: scaled_by_keda says so
        cap = budget.replica_cap(spec)  # within the connection budget, as the ScaledObject's minimum
        return {"spec": {"replicas": spec.autoscaling.min_replicas if cap is None
                         else min(spec.autoscaling.min_replicas, cap)}}
    return {}


@dataclass(frozen=True)
class Wanted:
    """One owned object: its kind and name, its manifest (None: should not exist), and the
    fields to set only when creating it (``initial_fields``)."""

    kind: kinds.Kind
    name: str
    manifest: dict[str, Any] | None
    on_create: dict[str, Any] = field(default_factory=dict)


def objects(spec: WorkerSpec, capabilities: kinds.Capabilities) -> list[Wanted]:
    """Every object a Worker owns: ``desired``'s, named after the Worker, then the console's
    (builders/console.py: a second Deployment and a Service, named <worker>-console)."""
    return [
        *(Wanted(kind, spec.name, manifest, initial_fields(kind, spec, capabilities))
          for kind, manifest in desired(spec, capabilities).items()),
        *(Wanted(kind, name, manifest) for kind, name, manifest in console.desired(spec)),
    ]


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
