"""The apiVersion, kind and plural of the Worker and of every object a Worker owns.

Data only, imported by everything that names a kind: the CRD (crd.py), the RBAC rules
(install.py), the builders, the API client (kube.py) and the handlers. ``Capabilities`` says
which optional kinds (add-ons' CRDs) a cluster serves.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "dbworker.dev"
VERSION = "v1alpha1"


@dataclass(frozen=True)
class Kind:
    """A namespaced kind the operator reads or owns objects of."""

    api_version: str
    kind: str
    plural: str
    optional: bool  # served only when an add-on's CRD is installed

    @property
    def group(self) -> str:
        """The API group ("" for the core group), as RBAC rules name it."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


WORKER = Kind(f"{GROUP}/{VERSION}", "Worker", "workers", optional=False)

DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments", optional=False)
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", optional=False)
SCALED_OBJECT = Kind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects", optional=True)
POD_MONITOR = Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors", optional=True)


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
