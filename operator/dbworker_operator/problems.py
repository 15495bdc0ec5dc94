"""Why a Worker is Degraded: each ``Problem`` (a CamelCase reason and a message naming the fix),
from what the handler found (spec, Secret, apply) and what its pods show (images, exits, crash loops).

Pure. The command's exit codes and termination-log tokens are read here; conditions.py turns
problems into the status. Messages never carry secret values: pod and API texts pass through ``redact``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dbworker_operator import kinds, redact
from dbworker_operator.spec import SecretRef, WorkerSpec

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
