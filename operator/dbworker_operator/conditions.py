"""A Worker's status (counts, backlog, Ready/Progressing/Degraded) and its Events, from what was observed.

Pure: handlers gather the observations (spec parse result, Secret, Deployment, pods, scraped
backlog, what was applied) and apply and post what this module decides: which problem a
reason names, which fix a message names, the status to write and the Events to post.
Messages never carry secret values: pod and API texts pass through ``redact``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dbworker_operator import budget as budgets
from dbworker_operator import crd, kinds, labels, redact
from dbworker_operator.builders import owned
from dbworker_operator.spec import DisruptionBudget, SecretRef, WorkerSpec

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
AUTOSCALING = "AutoscalingActive"
MONITORING = "PodMonitorActive"
DRAIN_BLOCKED = "DrainBlocked"
CONNECTION_BUDGET = "ConnectionBudget"  # True: the fleet at its largest would exceed spec.database.maxConnections

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Exit codes of the `dbworker` command (see its contract).
EXIT_BAD_INPUT = 2
EXIT_DATABASE_UNREACHABLE = 3
# Reason tokens of the `dbworker` command's termination-log line, `dbworker[<token>]: <message>`.
TOKEN_UNKNOWN_WORKER = "UnknownWorker"
TOKEN_BAD_INPUT = "BadInput"
TOKEN_DATABASE_UNREACHABLE = "DatabaseUnreachable"
TOKEN_UNEXPECTED = "Unexpected"
TOKENS = frozenset({TOKEN_UNKNOWN_WORKER, TOKEN_BAD_INPUT, TOKEN_DATABASE_UNREACHABLE, TOKEN_UNEXPECTED})
# Without a token (a log tail, or a line from a `dbworker` without tokens) the exit code decides.
_TOKEN_OF_EXIT_CODE = {EXIT_BAD_INPUT: TOKEN_BAD_INPUT, EXIT_DATABASE_UNREACHABLE: TOKEN_DATABASE_UNREACHABLE}

_TERMINATION_LINE = re.compile(r"^dbworker\[(?P<token>[A-Za-z]+)\]:[ \t]*(?P<text>.*)$", re.MULTILINE)
# The kubelet's CreateContainerConfigError messages for a Secret an env var names (pkg/kubelet).
_KUBELET_SECRET_MISSING = re.compile(r'secret "(?P<name>[^"]+)" not found')
_KUBELET_KEY_MISSING = re.compile(r"couldn't find key (?P<key>\S+) in Secret (?P<namespace>[^/\s]+)/(?P<name>\S+)")


@dataclass(frozen=True)
class Problem:
    """Why a Worker is Degraded: a CamelCase reason and a message that names the fix."""

    reason: str
    message: str


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


@dataclass(frozen=True)
class Termination:
    """A container's last exit as the `dbworker` command reports it."""

    code: int | None
    token: str | None  # the command's reason token; None when the message carries none
    message: str  # masked; a tokened line reads as the command's stderr line, `dbworker: <message>`


# ---- problems the handler finds ---------------------------------------------------------


def invalid_spec(error: Exception) -> Problem:
    """The spec got past the CRD but the operator cannot build from it (``spec.SpecError``)."""
    return Problem("InvalidSpec", f"{error}")


_SECRET_REF = "spec.database.urlSecretRef"


def secret_not_found(ref: SecretRef, namespace: str) -> Problem:
    name, key = ref.name, ref.key
    return Problem(
        "SecretNotFound",
        f"Secret {name!r} not found in namespace {namespace!r}: create it with the "
        f"database URL under key {key!r} (kubectl -n {namespace} create secret generic "
        f"{name} --from-literal={key}=<url>) or fix {_SECRET_REF}.name")


def secret_key_missing(ref: SecretRef) -> Problem:
    return Problem("SecretKeyMissing", f"Secret {ref.name!r} has no key {ref.key!r}: add the database URL "
                                       f"under that key or fix {_SECRET_REF}.key")


def secret_problem(spec: WorkerSpec, secret: Mapping[str, Any] | None) -> Problem | None:
    """What is wrong with the database Secret as read (None: it does not exist), or None."""
    if secret is None:
        return secret_not_found(spec.secret, spec.namespace)
    keys = {*(secret.get("data") or {}), *(secret.get("stringData") or {})}
    if spec.secret.key not in keys:
        return secret_key_missing(spec.secret)
    return None


def kubelet_secret_problem(message: str, ref: SecretRef | None, namespace: str) -> Problem | None:
    """The database Secret problem a pod's CreateContainerConfigError names (the operator may
    not read Secrets itself), or None when the message is about something else."""
    if ref is None:
        return None
    missing = _KUBELET_SECRET_MISSING.search(message)
    if missing and missing["name"] == ref.name:
        return secret_not_found(ref, namespace)
    key = _KUBELET_KEY_MISSING.search(message)
    if key and (key["name"], key["key"]) == (ref.name, ref.key):
        return secret_key_missing(ref)
    return None


def name_conflict(error: Exception) -> Problem:
    """A same-named object belongs to someone else (``kube.NotOwned``, whose message names the fix)."""
    return Problem("NameConflict", str(error))


def apply_failed(kind: kinds.Kind, name: str, message: str) -> Problem:
    """The API server rejected an owned object; ``message`` is its explanation."""
    return Problem("ApplyFailed", f"the API server rejected {kind.kind} {name}: {redact.message(message)}")


def autoscaling_problem(spec: WorkerSpec | None, capabilities: kinds.Capabilities) -> Problem | None:
    """Why the requested autoscaling cannot be active, or None (fine, or not requested)."""
    if spec is None or spec.autoscaling is None or capabilities.keda:
        return None
    return Problem(
        "KEDANotInstalled", "spec.autoscaling is set but KEDA is not installed (no keda.sh/v1alpha1 "
        "ScaledObject API): install KEDA or remove spec.autoscaling; replicas stay at spec.replicas")


def monitoring_problem(spec: WorkerSpec | None, capabilities: kinds.Capabilities) -> Problem | None:
    """Why the requested PodMonitor cannot be active, or None (fine, or not requested)."""
    if spec is None or not spec.pod_monitor or capabilities.pod_monitors:
        return None
    return Problem(
        "PrometheusOperatorNotInstalled", "spec.metrics.podMonitor is true but the Prometheus Operator is "
        "not installed (no monitoring.coreos.com/v1 PodMonitor API): install it or set podMonitor: false")


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


def _statuses(pod: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(key) or []:
            yield key, item


def termination(terminated: Mapping[str, Any]) -> Termination:
    """Read a ``terminated`` container state: exit code, the command's reason token, masked message.

    The token comes from the last `dbworker[<token>]: ...` line of the message; a message
    without one (a log tail, a `dbworker` that writes no token) keeps its text, and the exit
    code decides.
    """
    code = terminated.get("exitCode")
    raw = str(terminated.get("message") or "")
    lines = list(_TERMINATION_LINE.finditer(raw))
    if not lines:
        return Termination(code if isinstance(code, int) else None, None, redact.message(raw))
    last = lines[-1]
    return Termination(code if isinstance(code, int) else None, last["token"],
                       redact.message(f"dbworker: {last['text']}"))


def _exit_token(last_exit: Termination) -> str | None:
    if last_exit.token in TOKENS:
        return last_exit.token
    return _TOKEN_OF_EXIT_CODE.get(last_exit.code) if last_exit.code is not None else None


def pod_problems(pods: Iterable[Mapping[str, Any]], *, image: str, secret: SecretRef | None = None,
                 namespace: str = "") -> list[Problem]:
    """Problems visible on pods: images that never pull, the database Secret or key missing,
    containers that exit or crash-loop."""
    found: list[Problem] = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        for kind, item in _statuses(pod):
            container = item.get("name", "?")
            where = f"pod {name} container {container}"
            # A container running and ready again has recovered; its last exit is history.
            if item.get("ready") and (item.get("state") or {}).get("running") is not None:
                continue
            state = item.get("state") or {}
            waiting = state.get("waiting") or {}
            reason = waiting.get("reason", "")
            # The last exit; for an init container that failed once, the current state holds it.
            terminated = (item.get("lastState") or {}).get("terminated") or \
                (state.get("terminated") if kind == "initContainerStatuses" else None) or {}
            last_exit = termination(terminated)
            code, message = last_exit.code, last_exit.message
            token = _exit_token(last_exit)
            if reason in IMAGE_PULL_REASONS:
                found.append(Problem("ImagePullFailed",
                                     f"{where} cannot pull image {image!r} ({reason}): fix spec.image, or "
                                     "spec.imagePullSecrets if the registry needs credentials"))
            elif reason == "CreateContainerConfigError":
                detail = redact.message(str(waiting.get("message") or ""))
                found.append(kubelet_secret_problem(detail, secret, namespace) or Problem(
                    "ContainerConfigError",
                    f"{where} cannot start: {detail}: check spec.database.urlSecretRef, spec.env/envFrom, and "
                    "that the image runs as a non-root numeric user (or set spec.podSecurityContext.runAsUser)"))
            elif token == TOKEN_UNKNOWN_WORKER:
                found.append(Problem("UnknownWorker",
                                     f"{where} exited with code {code}: {message}: fix spec.workers and "
                                     "spec.concurrency to use names the application registers"))
            elif token == TOKEN_BAD_INPUT:
                found.append(Problem("BadConfiguration",
                                     f"{where} exited with code {code}: {message or 'see kubectl logs'}: "
                                     "check spec.app (MODULE:ATTR inside the image) and the spec's settings"))
            elif token == TOKEN_DATABASE_UNREACHABLE:
                found.append(Problem("DatabaseUnreachable",
                                     f"{where} exited with code {code}: {message or 'database unreachable'}: "
                                     "check the URL in the Secret named by spec.database.urlSecretRef and "
                                     "that the database accepts connections from the pods"))
            elif reason == "CrashLoopBackOff":
                found.append(Problem("CrashLoopBackOff",
                                     f"{where} is crash-looping (last exit code {code}): "
                                     f"{message or 'see kubectl logs --previous'}"))
    return found


# ---- the status and the Events ------------------------------------------------------------


def _condition(ctype: str, status: bool, reason: str, message: str, observed: Observed) -> dict[str, Any]:
    text = "True" if status else "False"
    since = observed.now
    for old in observed.previous:
        # Keep the transition time while the status holds: it says since when, not last checked.
        if old.get("type") == ctype and old.get("status") == text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
    if len(message) > crd.CONDITION_MESSAGE_MAX:  # metav1.Condition's bound; the API server would refuse more
        message = message[: crd.CONDITION_MESSAGE_MAX - 3] + "..."
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
