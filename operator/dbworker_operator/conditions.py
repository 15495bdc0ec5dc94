"""A Worker's status (counts, backlog, Ready/Progressing/Degraded) and its Events, from what was observed.

Pure: handlers gather the observations (spec parse result, Secret, Deployment, pods, scraped
backlog, what was applied) and apply and post what this module decides: the status to write
and the Events to post. Which problem a reason names and which fix a message names is
problems.py's; the first problem found makes the Worker Degraded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dbworker_operator import budget as budgets
from dbworker_operator import kinds, labels, rules
from dbworker_operator.builders import owned
from dbworker_operator.problems import (
    Problem,
    autoscaling_problem,
    monitoring_problem,
    pod_problems,
)
from dbworker_operator.spec import DisruptionBudget, SecretRef, WorkerSpec

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
AUTOSCALING = "AutoscalingActive"
MONITORING = "PodMonitorActive"
DRAIN_BLOCKED = "DrainBlocked"
CONNECTION_BUDGET = "ConnectionBudget"  # True: the fleet at its largest would exceed spec.database.maxConnections

@dataclass(frozen=True)
class Event:
    """A core/v1 Event to post about a Worker (type Normal or Warning)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """Everything the status is computed from, gathered by one reconcile."""

    generation: int
    desired_replicas: int
    selector: str
    deployment: Mapping[str, Any] | None = None
    pods: Sequence[Mapping[str, Any]] = ()
    backlog: int | None = None
    problems: Sequence[Problem] = ()  # spec, Secret and apply problems found by the handler
    autoscaling: Problem | None = None  # why requested autoscaling is inactive; None = fine/not asked
    autoscaling_requested: bool = False
    monitoring: Problem | None = None
    monitoring_requested: bool = False
    previous: Sequence[Mapping[str, Any]] = field(default_factory=list)
    now: str = ""
    image: str = ""  # spec.image, named by image-pull problems
    secret: SecretRef | None = None  # spec.database.urlSecretRef, named by problems the kubelet reports
    namespace: str = ""
    monitoring_labels: Mapping[str, str] = field(default_factory=dict)  # the PodMonitor's labels
    budget: DisruptionBudget | None = None  # spec.disruptionBudget, checked against desired_replicas
    connections: budgets.Budget | None = None  # spec.database.maxConnections against the fleet's largest


# ---- what was observed --------------------------------------------------------------------


def desired_replicas(spec: WorkerSpec | None, capabilities: kinds.Capabilities,
                     deployment: Mapping[str, Any] | None) -> int:
    """The pod count the Worker is measured against: KEDA's while it scales, else the spec's;
    without a usable spec, whatever the Deployment asks for."""
    deployment_replicas = int(((deployment or {}).get("spec") or {}).get("replicas") or 0)
    if spec is None:
        return deployment_replicas
    if owned.scaled_by_keda(spec, capabilities) and deployment is not None:
        return deployment_replicas
    return spec.replicas


def observe(body: Mapping[str, Any], *, spec: WorkerSpec | None, capabilities: kinds.Capabilities,
            problems: Sequence[Problem], deployment: Mapping[str, Any] | None,
            pods: Sequence[Mapping[str, Any]], backlog: int | None, now: str) -> Observed:
    """The ``Observed`` of one reconcile of the Worker ``body`` (spec None: it did not parse)."""
    meta = body.get("metadata") or {}
    previous = body.get("status") or {}
    return Observed(
        generation=int(meta.get("generation") or 0),
        desired_replicas=desired_replicas(spec, capabilities, deployment),
        selector=labels.selector_string(str(meta.get("name") or "")),
        deployment=deployment,
        pods=pods,
        backlog=backlog,
        problems=problems,
        autoscaling=autoscaling_problem(spec, capabilities),
        autoscaling_requested=spec is not None and spec.autoscaling is not None,
        monitoring=monitoring_problem(spec, capabilities),
        monitoring_requested=spec is not None and spec.pod_monitor,
        previous=list(previous.get("conditions") or []),
        now=now,
        image=spec.image if spec else "",
        secret=spec.secret if spec else None,
        namespace=str(meta.get("namespace") or ""),
        monitoring_labels=dict(spec.pod_monitor_labels) if spec else {},
        budget=spec.disruption_budget if spec else None,
        connections=budgets.of(spec, autoscaled=owned.scaled_by_keda(spec, capabilities)) if spec else None,
    )


# ---- the status and the Events ------------------------------------------------------------


def _condition(ctype: str, status: bool, reason: str, message: str, observed: Observed) -> dict[str, Any]:
    text = "True" if status else "False"
    since = observed.now
    for old in observed.previous:
        # Keep the transition time while the status holds: it says since when, not last checked.
        if old.get("type") == ctype and old.get("status") == text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
    if len(message) > rules.CONDITION_MESSAGE_MAX:  # metav1.Condition's bound; the API server would refuse more
        message = message[: rules.CONDITION_MESSAGE_MAX - 3] + "..."
    return {"type": ctype, "status": text, "reason": reason, "message": message,
            "lastTransitionTime": since, "observedGeneration": observed.generation}


def status(observed: Observed) -> dict[str, Any]:
    """The Worker's whole ``status`` for ``observed``."""
    dstatus = (observed.deployment or {}).get("status") or {}
    dmeta = (observed.deployment or {}).get("metadata") or {}
    replicas = int(dstatus.get("replicas") or 0)
    ready = int(dstatus.get("readyReplicas") or 0)
    updated = int(dstatus.get("updatedReplicas") or 0)
    available = int(dstatus.get("availableReplicas") or 0)
    want = observed.desired_replicas
    rolled_out = (
        observed.deployment is not None
        and int(dstatus.get("observedGeneration") or 0) >= int(dmeta.get("generation") or 0)
        and updated >= want and replicas == want and available >= want
    )

    problems = [*observed.problems, *pod_problems(observed.pods, image=observed.image, secret=observed.secret,
                                                  namespace=observed.namespace)]
    degraded = problems[0] if problems else None
    conditions = [
        _condition(DEGRADED, degraded is not None,
                   degraded.reason if degraded else "AsExpected",
                   degraded.message if degraded else "no problems observed", observed),
    ]
    if observed.deployment is None:
        progressing = (True, "Creating", "creating the Deployment")
    elif rolled_out:
        progressing = (False, "RolledOut", f"{ready}/{want} pods ready on the current spec")
    else:
        progressing = (True, "RollingOut", f"{updated}/{want} pods updated, {ready} ready")
    conditions.append(_condition(PROGRESSING, *progressing, observed))
    is_ready = degraded is None and rolled_out and ready >= want
    if is_ready:
        ready_msg = "scaled to zero" if want == 0 else f"{ready}/{want} pods ready"
        conditions.append(_condition(READY, True, "AllPodsReady" if want else "ScaledToZero", ready_msg, observed))
    else:
        why = degraded.reason if degraded else "PodsNotReady"
        conditions.append(_condition(READY, False, why, f"{ready}/{want} pods ready", observed))
    if observed.autoscaling_requested:
        problem = observed.autoscaling
        conditions.append(_condition(AUTOSCALING, problem is None,
                                     problem.reason if problem else "ScaledObjectApplied",
                                     problem.message if problem else _autoscaling_active(observed),
                                     observed))
    if observed.monitoring_requested:
        problem = observed.monitoring
        conditions.append(_condition(MONITORING, problem is None,
                                     problem.reason if problem else "PodMonitorApplied",
                                     problem.message if problem else _pod_monitor_applied(observed),
                                     observed))
    if observed.budget is not None:
        blocked = drain_blocked(observed.budget, want)
        conditions.append(_condition(DRAIN_BLOCKED, blocked is not None,
                                     blocked.reason if blocked else "EvictionsAllowed",
                                     blocked.message if blocked else
                                     f"the disruption budget lets {evictions_allowed(observed.budget, want)} of "
                                     f"{want} pods be evicted at a time", observed))
    if observed.connections is not None:
        conditions.append(_condition(CONNECTION_BUDGET, *connection_budget(observed.connections), observed))
    result: dict[str, Any] = {
        "observedGeneration": observed.generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "desiredReplicas": want,
        "selector": observed.selector,
        "conditions": conditions,
    }
    if observed.backlog is not None:
        result["backlog"] = observed.backlog
    return result


def _autoscaling_active(observed: Observed) -> str:
    text = "KEDA scales the Deployment on the work in flight plus waiting per handler slot"
    if observed.monitoring_requested and observed.monitoring is None:
        return text
    return (f"{text}; its query reads dbworker_backlog series labelled app_kubernetes_io_instance: without "
            "spec.metrics.podMonitor, your scrape configuration must copy the pod labels (a labelmap of "
            "__meta_kubernetes_pod_label_(.+))")


def _pod_monitor_applied(observed: Observed) -> str:
    shown = ",".join(f"{k}={v}" for k, v in sorted(observed.monitoring_labels.items()))
    return (f"PodMonitor applied with labels {shown or 'none but the app.kubernetes.io/* ones'}; "
            "the operator cannot see whether a Prometheus selects it: its podMonitorSelector must match these labels (kube-prometheus-stack selects release=<its "
            "release>: set spec.metrics.podMonitorLabels or the chart's podMonitor.labels) and its "
            "podMonitorNamespaceSelector this namespace")


def connection_budget(budget: budgets.Budget) -> tuple[bool, str, str]:
    """The ConnectionBudget condition's status, reason and message, with the numbers."""
    pods = budget.largest_pods
    need = (f"{pods} pod(s) plus a rollout's extra one at {budget.per_pod} connections each need "
            f"{budget.needed} of spec.database.maxConnections {budget.max_connections}")
    if not budget.exceeded:
        return False, "WithinBudget", need
    if budget.autoscaled:
        return True, "AutoscalingCapped", (f"{need}: KEDA may run at most {budget.fits_pods} pod(s); raise "
                                           "maxConnections, put a pooler in front, or lower spec.concurrency")
    return True, "BudgetExceeded", (f"{need}: lower spec.replicas to {budget.fits_pods} or less, raise "
                                    "maxConnections, or lower spec.concurrency")


def _scaled(value: int | str, total: int) -> int:
    """A count or percentage of ``total``, rounded up, as the disruption controller computes it."""
    if isinstance(value, int):
        return value
    return -(-total * int(value.rstrip("%")) // 100)


def evictions_allowed(budget: DisruptionBudget, desired: int) -> int:
    """Pods the budget lets be evicted at once while all ``desired`` pods are healthy."""
    if budget.min_available is not None:
        return max(0, desired - _scaled(budget.min_available, desired))
    return min(desired, _scaled(budget.max_unavailable or 0, desired))


def drain_blocked(budget: DisruptionBudget, desired: int) -> Problem | None:
    """Why the budget blocks every voluntary eviction (so every node drain) at ``desired`` pods, or None."""
    if desired == 0 or evictions_allowed(budget, desired) > 0:
        return None
    field_, value = (("minAvailable", budget.min_available) if budget.min_available is not None
                     else ("maxUnavailable", budget.max_unavailable))
    return Problem("BudgetAllowsNoEviction",
                   f"spec.disruptionBudget.{field_} {value} with {desired} desired pod(s) allows no eviction: "
                   "every node drain waits on these pods until someone intervenes; use maxUnavailable: 1, "
                   "a lower minAvailable, or more replicas")


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when ``new`` differs from ``old`` in anything but kopf's bookkeeping."""
    old = {k: v for k, v in (old or {}).items() if k != "kopf"}
    return dict(old) != dict(new)


def status_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch of ``status`` taking ``previous`` to ``new``, or None when nothing changed."""
    patch = dict(new)
    if "backlog" not in patch and "backlog" in previous:
        patch["backlog"] = None  # merge-patch removal: no pod answered, so no number is honest
    return patch if changed(previous, patch) else None


def _true(status: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return dict(cond)
    return None


def degraded(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Degraded condition of ``status`` when it is True, else None."""
    return _true(status, DEGRADED)


def events(previous: Mapping[str, Any], new: Mapping[str, Any], changes: Iterable[str]) -> list[Event]:
    """The Events for one reconcile, each once: objects applied (``changes``), a budget that
    blocks drains (Warning), Degraded raised or changed (Warning, its reason and message),
    Degraded cleared (Normal ``Recovered``); a connection budget exceeded (Warning)."""
    found = [Event("Normal", "Applied", change) for change in changes]
    for ctype in (DRAIN_BLOCKED, CONNECTION_BUDGET):
        blocked_before, blocked = _true(previous, ctype), _true(new, ctype)
        if blocked is not None and (blocked_before is None or
                                    blocked_before.get("message") != blocked.get("message")):
            found.append(Event("Warning", str(blocked.get("reason")), str(blocked.get("message"))))
    old, now = degraded(previous), degraded(new)
    if now is not None and (old is None or (old.get("reason"), old.get("message")) !=
                            (now.get("reason"), now.get("message"))):
        found.append(Event("Warning", str(now.get("reason")), str(now.get("message"))))
    elif now is None and old is not None:
        found.append(Event("Normal", "Recovered", f"no longer degraded ({old.get('reason')})"))
    return found
