"""The fleet's connection budget (spec.database.maxConnections): what it needs at its largest, what fits.

Pure. One pod opens ``WorkerSpec.connections_per_pod`` connections; the fleet at its largest
runs ``autoscaling.maxReplicas`` pods (``replicas`` without autoscaling) plus the rollout's
extra pod. The ScaledObject's maxReplicaCount is capped to what fits (builders/autoscaling.py);
a fixed ``replicas`` is the user's to lower, so it is only reported (conditions.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from dbworker_operator.spec import ROLLOUT_SURGE, WorkerSpec


@dataclass(frozen=True)
class Budget:
    """The numbers of a Worker with ``spec.database.maxConnections``."""

    max_connections: int
    per_pod: int
    largest_pods: int  # pods wanted at the fleet's largest (before the cap)
    fits_pods: int  # pods that fit beside a rollout's extra pod
    autoscaled: bool

    @property
    def needed(self) -> int:
        """Connections at the fleet's largest, a rollout's extra pod included."""
        return self.per_pod * (self.largest_pods + (ROLLOUT_SURGE if self.largest_pods else 0))

    @property
    def exceeded(self) -> bool:
        return self.needed > self.max_connections


def of(spec: WorkerSpec, *, autoscaled: bool) -> Budget | None:
    """The budget of ``spec`` (None without maxConnections); ``autoscaled``: KEDA drives the count."""
    if spec.max_connections is None:
        return None
    per_pod = spec.connections_per_pod
    largest = spec.autoscaling.max_replicas if autoscaled and spec.autoscaling else spec.replicas
    # spec.parse refuses a budget below one pod plus the surge, so at least one pod fits.
    fits = max(1, spec.max_connections // max(per_pod, 1) - ROLLOUT_SURGE)
    return Budget(spec.max_connections, per_pod, largest, fits, autoscaled)


def replica_cap(spec: WorkerSpec) -> int | None:
    """The most pods KEDA may run within the budget (None: no budget)."""
    budget = of(spec, autoscaled=True)
    if budget is None or spec.autoscaling is None:
        return None
    return min(spec.autoscaling.max_replicas, budget.fits_pods)
