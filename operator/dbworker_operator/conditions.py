"""A Worker's status (counts, backlog, Ready/Progressing/Degraded) from what was observed.

Pure: handlers gather the observations (spec parse result, Secret check, Deployment, pods,
scraped backlog); this module decides what they mean and which fix a message names.
Messages never carry secret values: pod messages pass through ``redact``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
AUTOSCALING = "AutoscalingActive"
MONITORING = "PodMonitorActive"

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Exit codes of the `dbworker` command (see its contract).
EXIT_BAD_INPUT = 2
EXIT_DATABASE_UNREACHABLE = 3

_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def redact(text: str, *, limit: int = 500) -> str:
    """``text`` with any URL password replaced by ***, cut to ``limit`` characters."""
    text = _URL_PASSWORD.sub(r"\1***@", text.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """Why a Worker is Degraded: a CamelCase reason and a message that names the fix."""

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


def _statuses(pod: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(key) or []:
            yield key, item


def pod_problems(pods: Iterable[Mapping[str, Any]], *, image: str) -> list[Problem]:
    """Problems visible on pods: images that never pull, containers that exit or crash-loop."""
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
            code = terminated.get("exitCode")
            message = redact(str(terminated.get("message") or ""))
            if reason in IMAGE_PULL_REASONS:
                found.append(Problem("ImagePullFailed",
                                     f"{where} cannot pull image {image!r} ({reason}): fix spec.image, or "
                                     "spec.imagePullSecrets if the registry needs credentials"))
            elif reason == "CreateContainerConfigError":
                detail = redact(str(waiting.get("message") or ""))
                found.append(Problem("ContainerConfigError",
                                     f"{where} cannot start: {detail}: check spec.database.urlSecretRef, "
                                     "spec.env/envFrom, and that the image runs as a non-root numeric user"))
            elif code == EXIT_BAD_INPUT and "unknown worker" in message:
                found.append(Problem("UnknownWorker",
                                     f"{where} exited with code 2: {message}: fix spec.workers and "
                                     "spec.concurrency to use names the application registers"))
            elif code == EXIT_BAD_INPUT:
                found.append(Problem("BadConfiguration",
                                     f"{where} exited with code 2: {message or 'see kubectl logs'}: "
                                     "check spec.app (MODULE:ATTR inside the image) and the spec's settings"))
            elif code == EXIT_DATABASE_UNREACHABLE:
                found.append(Problem("DatabaseUnreachable",
                                     f"{where} exited with code 3: {message or 'database unreachable'}: check the "
                                     "URL in the Secret named by spec.database.urlSecretRef and that the "
                                     "database accepts connections from the pods"))
            elif reason == "CrashLoopBackOff":
                found.append(Problem("CrashLoopBackOff",
                                     f"{where} is crash-looping (last exit code {code}): "
                                     f"{message or 'see kubectl logs --previous'}"))
    return found


def _condition(ctype: str, status: bool, reason: str, message: str, observed: Observed) -> dict[str, Any]:
    text = "True" if status else "False"
    since = observed.now
    for old in observed.previous:
        # Keep the transition time while the status holds: it says since when, not last checked.
        if old.get("type") == ctype and old.get("status") == text and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
    return {"type": ctype, "status": text, "reason": reason, "message": message,
            "lastTransitionTime": since, "observedGeneration": observed.generation}


def status(observed: Observed, *, image: str = "") -> dict[str, Any]:
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

    problems = [*observed.problems, *pod_problems(observed.pods, image=image)]
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
                                     problem.message if problem else "KEDA scales the Deployment on the backlog",
                                     observed))
    if observed.monitoring_requested:
        problem = observed.monitoring
        conditions.append(_condition(MONITORING, problem is None,
                                     problem.reason if problem else "PodMonitorApplied",
                                     problem.message if problem else "Prometheus Operator scrapes the pods",
                                     observed))
    result: dict[str, Any] = {
        "observedGeneration": observed.generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "selector": observed.selector,
        "conditions": conditions,
    }
    if observed.backlog is not None:
        result["backlog"] = observed.backlog
    return result


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when ``new`` differs from ``old`` in anything but kopf's bookkeeping."""
    old = {k: v for k, v in (old or {}).items() if k != "kopf"}
    return dict(old) != dict(new)
