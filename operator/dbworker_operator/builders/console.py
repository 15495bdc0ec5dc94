"""The console (spec.console): `dbworker console <app>` pods and the Service in front of them.

Pure: a ``WorkerSpec`` in, the Deployment and Service named ``<worker>-console`` out (None for
both when the console is off, so the handlers delete leftovers). The pod is the workers' pod
(builders/deployment.py: security contexts, bounded /tmp, no API token unless asked, the
migrate init container, scheduling) with the console container in place of the worker's.

The console's pods carry ``app.kubernetes.io/name: dbworker-console``: the workers' selector
(name ``dbworker`` and the instance) must never match them, or the PodDisruptionBudget, the
PodMonitor, the scrape and the KEDA query would count console pods as workers.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds, labels, rules
from dbworker_operator.builders import deployment
from dbworker_operator.spec import ROLLOUT_SURGE, WorkerSpec

NAME = "dbworker-console"
COMPONENT = "console"
CONTAINER = "console"
PORT_NAME = "http"
# The console holds no work: SIGTERM ends it within a second or two.
GRACE_SECONDS = 15
# Variables the console's container sets itself; the spec's own of these names are dropped.
OWN_ENV = ("DBWORKER_CONSOLE_TOKEN", "DBWORKER_READ_ONLY", "DBWORKER_HOST", "DBWORKER_PORT")


def name(spec: WorkerSpec) -> str:
    """The console's Deployment and Service name (spec.py checks it is a DNS-1035 label)."""
    return spec.name + rules.CONSOLE_SUFFIX


def selector(spec: WorkerSpec) -> dict[str, str]:
    """The console pods' selector: stable across updates, disjoint from the workers' (labels.selector)."""
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": spec.name}


def object_labels(spec: WorkerSpec) -> dict[str, str]:
    return {**selector(spec), "app.kubernetes.io/component": COMPONENT,
            "app.kubernetes.io/managed-by": labels.MANAGED_BY, "app.kubernetes.io/part-of": labels.NAME}


def env(spec: WorkerSpec) -> list[dict[str, Any]]:
    """The workers' environment (database URL from its Secret, the spec's variables), then the
    token from spec.console.tokenSecretRef and read-only mode."""
    assert spec.console is not None  # callers build only an enabled console
    ours: list[dict[str, Any]] = [
        {"name": "DBWORKER_CONSOLE_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": spec.console.token_secret.name, "key": spec.console.token_secret.key}}},
        {"name": "DBWORKER_READ_ONLY", "value": "true" if spec.console.read_only else "false"},
    ]
    return [item for item in deployment.dbworker_env(spec) if item["name"] not in OWN_ENV] + ours


def container(spec: WorkerSpec) -> dict[str, Any]:
    assert spec.console is not None
    probe = {"httpGet": {"path": "/healthz", "port": PORT_NAME, "scheme": "HTTP"}}
    result: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        # Listens on every address of the pod: the token is required there (spec.py insists on one).
        "command": ["dbworker", "console", spec.app, "--host", "0.0.0.0", "--port", str(rules.CONSOLE_PORT)],
        "env": env(spec),
        "ports": [{"name": PORT_NAME, "containerPort": rules.CONSOLE_PORT, "protocol": "TCP"}],
        "securityContext": deployment.container_security_context(spec),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": deployment.TMP_VOLUME, "mountPath": "/tmp"}],
        # /healthz answers without a token once the application is imported and the tables checked.
        "startupProbe": {**probe, "periodSeconds": 2, "failureThreshold": 60, "timeoutSeconds": 2},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 5},
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 2, "timeoutSeconds": 3},
    }
    if spec.image_pull_policy:
        result["imagePullPolicy"] = spec.image_pull_policy
    if spec.env_from:
        result["envFrom"] = [dict(item) for item in spec.env_from]
    if spec.console.resources:
        result["resources"] = dict(spec.console.resources)
    return result


def build_deployment(spec: WorkerSpec) -> dict[str, Any] | None:
    """The console's Deployment, or None when spec.console is off."""
    if spec.console is None:
        return None
    pod = deployment.pod_spec(spec)
    pod["containers"] = [container(spec)]
    pod["terminationGracePeriodSeconds"] = GRACE_SECONDS
    return {
        "apiVersion": kinds.DEPLOYMENT.api_version,
        "kind": kinds.DEPLOYMENT.kind,
        "metadata": {"name": name(spec), "namespace": spec.namespace, "labels": object_labels(spec)},
        "spec": {
            "replicas": spec.console.replicas,
            "selector": {"matchLabels": selector(spec)},
            "revisionHistoryLimit": 5,
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": ROLLOUT_SURGE, "maxUnavailable": 0}},
            "template": {
                # The spec's pod labels and annotations; no prometheus.io hints (no /metrics here).
                "metadata": {"labels": {**spec.pod_labels, **object_labels(spec)},
                             "annotations": dict(spec.pod_annotations)},
                "spec": pod,
            },
        },
    }


def build_service(spec: WorkerSpec) -> dict[str, Any] | None:
    """The console's Service (spec.console.service: type and port), or None when it is off."""
    if spec.console is None:
        return None
    return {
        "apiVersion": kinds.SERVICE.api_version,
        "kind": kinds.SERVICE.kind,
        "metadata": {"name": name(spec), "namespace": spec.namespace, "labels": object_labels(spec)},
        "spec": {
            "type": spec.console.service_type,
            "selector": selector(spec),
            "ports": [{"name": PORT_NAME, "port": spec.console.service_port, "targetPort": PORT_NAME,
                       "protocol": "TCP"}],
        },
    }


def desired(spec: WorkerSpec) -> list[tuple[kinds.Kind, str, dict[str, Any] | None]]:
    """(kind, name, manifest or None) of each console object, whether the console is on or off."""
    return [(kinds.DEPLOYMENT, name(spec), build_deployment(spec)),
            (kinds.SERVICE, name(spec), build_service(spec))]
