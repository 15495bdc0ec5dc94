"""The worker Deployment: `dbworker run <app>` pods, hardened, probed, drained on stop.

Pure: a ``WorkerSpec`` in, an apps/v1 Deployment dict out. Ownership (ownerReferences) is
added by the handlers; which replicas count to write is their choice too (autoscaling).
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds, labels
from dbworker_operator.spec import ROLLOUT_SURGE, WorkerSpec

CONTAINER = "worker"
MIGRATE_CONTAINER = "migrate"
METRICS_PORT_NAME = "metrics"
# Room beyond the drain for the process to release claims and exit after its handlers stop.
GRACE_MARGIN_SECONDS = 15
TMP_VOLUME = "tmp"


def _number(value: float) -> str:
    """Seconds as the CLI reads them: 30 not 30.0, 0.25 as is."""
    return f"{value:g}"


def dbworker_env(spec: WorkerSpec) -> list[dict[str, Any]]:
    """The environment of both containers: the database URL (and the direct LISTEN URL) from
    Secrets, then DBWORKER_*."""
    env: list[dict[str, Any]] = [
        {"name": spec.env_name,
         "valueFrom": {"secretKeyRef": {"name": spec.secret.name, "key": spec.secret.key}}},
        *([{"name": "DBWORKER_LISTEN_URL",  # the pod's one LISTEN connection, past the pooler
            "valueFrom": {"secretKeyRef": {"name": spec.listen_secret.name, "key": spec.listen_secret.key}}}]
          if spec.listen_secret else []),
        *([{"name": "DBWORKER_TRANSACTION_POOLER", "value": "true"}] if spec.transaction_pooler else []),
        {"name": "DBWORKER_METRICS_PORT", "value": str(spec.metrics_port)},
        {"name": "DBWORKER_DRAIN_SECONDS", "value": str(spec.drain_seconds)},
        {"name": "DBWORKER_LOG_FORMAT", "value": "json"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if spec.workers:
        env.append({"name": "DBWORKER_WORKER", "value": ",".join(spec.workers)})
    if spec.concurrency:
        env.append({"name": "DBWORKER_CONCURRENCY", "value": ",".join(f"{k}={n}" for k, n in spec.concurrency)})
    if spec.processes:
        env.append({"name": "DBWORKER_PROCESSES", "value": ",".join(f"{k}={n}" for k, n in spec.processes)})
    for name, value in (("DBWORKER_LEASE_SECONDS", spec.lease_seconds),
                        ("DBWORKER_POLL_SECONDS", spec.poll_seconds),
                        ("DBWORKER_MAX_POLL_SECONDS", spec.max_poll_seconds)):
        if value is not None:
            env.append({"name": name, "value": _number(value)})
    if spec.log_level is not None:
        env.append({"name": "DBWORKER_LOG_LEVEL", "value": spec.log_level})
    if not spec.wakeup_triggers:
        env.append({"name": "DBWORKER_NO_WAKEUP_TRIGGERS", "value": "true"})
    # The user's variables come last so they can add to ours; ours win on a clash of names
    # because Kubernetes takes the last definition, so drop theirs where they repeat ours.
    ours = {item["name"] for item in env}
    env.extend(dict(item) for item in spec.env if item.get("name") not in ours)
    return env


def container_security_context(spec: WorkerSpec) -> dict[str, Any]:
    """The hardened container context, with the fields the spec may set (schemas.py lists them:
    user, group, seccomp profile). What `restricted` requires is never the spec's to change."""
    return {
        "seccompProfile": {"type": "RuntimeDefault"},
        **spec.container_security_context,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security_context(spec: WorkerSpec) -> dict[str, Any]:
    """runAsNonRoot and seccomp RuntimeDefault, plus the spec's user, groups and profile."""
    return {"seccompProfile": {"type": "RuntimeDefault"}, **spec.pod_security_context, "runAsNonRoot": True}


def _container(spec: WorkerSpec, name: str, command: list[str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": spec.image,
        # Exec form, no shell: signals reach dbworker directly and nothing is interpolated.
        "command": command,
        "env": dbworker_env(spec),
        "securityContext": container_security_context(spec),
        # dbworker writes its one-line error to /dev/termination-log on exit 2/3; fall back to logs.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": TMP_VOLUME, "mountPath": "/tmp"}],
    }
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if spec.env_from:
        container["envFrom"] = [dict(item) for item in spec.env_from]
    if spec.resources:
        container["resources"] = dict(spec.resources)
    return container


def worker_container(spec: WorkerSpec) -> dict[str, Any]:
    container = _container(spec, CONTAINER, ["dbworker", "run", spec.app])
    probe_port = {"port": METRICS_PORT_NAME, "scheme": "HTTP"}
    container["ports"] = [{"name": METRICS_PORT_NAME, "containerPort": spec.metrics_port, "protocol": "TCP"}]
    # Startup gives imports and the first database round trip time before liveness counts.
    container["startupProbe"] = {"httpGet": {"path": "/healthz", **probe_port},
                                 "periodSeconds": 2, "failureThreshold": 60, "timeoutSeconds": 2}
    container["livenessProbe"] = {"httpGet": {"path": "/healthz", **probe_port},
                                  "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 5}
    container["readinessProbe"] = {"httpGet": {"path": "/readyz", **probe_port},
                                   "periodSeconds": 5, "failureThreshold": 2, "timeoutSeconds": 3}
    return container


def pod_labels(spec: WorkerSpec) -> dict[str, str]:
    return {**spec.pod_labels, **labels.common(spec.name)}


def pod_annotations(spec: WorkerSpec, *, pod_monitor: bool = False) -> dict[str, str]:
    """Plain-Prometheus discovery hints, unless a PodMonitor scrapes the pods (a Prometheus
    honouring both would scrape each pod twice); the user's annotations win."""
    hints = {} if pod_monitor else {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.metrics_port),
        "prometheus.io/path": "/metrics",
    }
    return {**hints, **spec.pod_annotations}


def pod_spec(spec: WorkerSpec) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": spec.drain_seconds + GRACE_MARGIN_SECONDS,
        "securityContext": pod_security_context(spec),
        "containers": [worker_container(spec)],
        # Bounded: a runaway handler filling /tmp gets its pod evicted, not the node's disk full.
        "volumes": [{"name": TMP_VOLUME, "emptyDir": {"sizeLimit": spec.tmp_size_limit}}],
        "enableServiceLinks": False,
        # Workers talk to their database, not to Kubernetes: no API token unless the spec asks.
        "automountServiceAccountToken": spec.automount_service_account_token,
    }
    if spec.migrate:
        pod["initContainers"] = [_container(spec, MIGRATE_CONTAINER, ["dbworker", "migrate", spec.app])]
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.affinity:
        pod["affinity"] = dict(spec.affinity)
    return pod


def build(spec: WorkerSpec, *, replicas: int | None, pod_monitor: bool = False) -> dict[str, Any]:
    """The Deployment for ``spec``; ``replicas=None`` leaves the count to an autoscaler;
    ``pod_monitor`` says a PodMonitor scrapes the pods (so no prometheus.io hints)."""
    deployment: dict[str, Any] = {
        "apiVersion": kinds.DEPLOYMENT.api_version,
        "kind": kinds.DEPLOYMENT.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels.common(spec.name)},
        "spec": {
            "selector": {"matchLabels": labels.selector(spec.name)},
            "revisionHistoryLimit": 5,
            # Start the new pod before stopping an old one: capacity never dips during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": ROLLOUT_SURGE, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": pod_labels(spec),
                             "annotations": pod_annotations(spec, pod_monitor=pod_monitor)},
                "spec": pod_spec(spec),
            },
        },
    }
    if replicas is not None:
        deployment["spec"]["replicas"] = replicas
    return deployment
