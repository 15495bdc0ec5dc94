"""The apiVersion, kind and plural of the Worker and of every object a Worker owns.

Data only (and the reading of the server's /version), imported by everything that names a
kind: the CRD (crd.py), the RBAC rules (install.py), the builders, the API client (kube.py)
and the handlers. ``Capabilities`` says which optional kinds (add-ons' CRDs) and which
version-gated fields a cluster serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
# The console's (spec.console): its Service; its Deployment is a second DEPLOYMENT.
SERVICE = Kind("v1", "Service", "services", optional=False)
SCALED_OBJECT = Kind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects", optional=True)
# KEDA's credentials for the database trigger (scale from zero); served wherever ScaledObjects are.
TRIGGER_AUTHENTICATION = Kind("keda.sh/v1alpha1", "TriggerAuthentication", "triggerauthentications", optional=True)
POD_MONITOR = Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors", optional=True)


# PodDisruptionBudget.spec.unhealthyPodEvictionPolicy: absent before Kubernetes 1.26, behind a
# feature gate that is off by default in 1.26 (alpha), on from 1.27 (beta), GA in 1.31. Sent to
# a server without it, the field is dropped, so the PDB would never match what the operator wants.
UNHEALTHY_POD_EVICTION_SINCE = (1, 27)


def parse_server_version(version: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(major, minor) from the API server's /version ("27+" on some providers), None if unreadable."""
    try:
        major = int(re.sub(r"\D", "", str((version or {})["major"])))
        minor = int(re.sub(r"\D", "", str((version or {})["minor"])))
    except (KeyError, ValueError):
        return None
    return major, minor


@dataclass(frozen=True)
class Capabilities:
    """What the cluster serves: optional kinds (API discovery) and version-gated fields (/version)."""

    keda: bool = False
    pod_monitors: bool = False
    server_version: tuple[int, int] | None = None  # None: unknown, so no version-gated field is sent

    @property
    def unhealthy_pod_eviction_policy(self) -> bool:
        return self.server_version is not None and self.server_version >= UNHEALTHY_POD_EVICTION_SINCE

    def serves(self, kind: Kind) -> bool:
        if kind is SCALED_OBJECT or kind is TRIGGER_AUTHENTICATION:
            return self.keda
        if kind is POD_MONITOR:
            return self.pod_monitors
        return True
