"""The operator's own install: its RBAC rules, and for users without Helm its RBAC objects,
peering object and Deployment.

Data only. generate.py writes the rules into the chart (``files/rbac-rules.yaml``) and these
manifests into ``operator/manifests/``, so the raw manifests and the chart share one set of rules.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import __version__, kinds

NAMESPACE = "dbworker-system"
NAME = "dbworker-operator"
IMAGE = f"dbworker-operator:{__version__}"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "dbworker"}


def _meta(name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespaced:
        meta["namespace"] = NAMESPACE
    return meta


def rbac_rules() -> list[dict[str, Any]]:
    """The operator's PolicyRules: exactly what kopf, handlers.py and kube.py touch, nothing more."""
    watch = ["get", "list", "watch"]  # what kopf needs for a resource it watches
    own = ["get", "create", "patch", "delete"]  # kube.apply and the deletion of dropped features
    worker = kinds.WORKER
    return [
        {"apiGroups": [worker.group], "resources": [worker.plural], "verbs": [*watch, "patch"]},
        {"apiGroups": [worker.group], "resources": [f"{worker.plural}/status"], "verbs": ["get", "patch"]},
        # Owner references with blockOwnerDeletion need `update` on the owner's finalizers.
        {"apiGroups": [worker.group], "resources": [f"{worker.plural}/finalizers"], "verbs": ["update"]},
        {"apiGroups": [kinds.DEPLOYMENT.group], "resources": [kinds.DEPLOYMENT.plural],
         "verbs": [*watch, "create", "patch", "delete"]},
        *({"apiGroups": [kind.group], "resources": [kind.plural], "verbs": own}
          for kind in (kinds.PDB, kinds.SCALED_OBJECT, kinds.POD_MONITOR)),
        # Pods: read state and termination messages, set the pod-deletion-cost annotation.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
        # Secrets: only `get`, to say "Secret x has no key y" before pods fail on it.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # kopf follows namespaces and CRDs to know what it can watch.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": watch},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": watch},
        {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings", "clusterkopfpeerings"], "verbs": [*watch, "patch"]},
    ]


def rbac() -> list[dict[str, Any]]:
    """Namespace, ServiceAccount, ClusterRole (``rbac_rules``) and its binding."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, namespaced=False)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(NAME, namespaced=False), "rules": rbac_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(NAME, namespaced=False),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
    ]


def deployment(image: str = IMAGE) -> list[dict[str, Any]]:
    """kopf's peering object, the operator Deployment (two replicas, one acts) and its metrics Service."""
    security = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "privileged": False, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    container = {
        "name": "operator",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "DBWORKER_OPERATOR_NAMESPACES", "value": ""},
            {"name": "DBWORKER_OPERATOR_PEERING", "value": NAME},
            {"name": "DBWORKER_OPERATOR_LIVENESS_PORT", "value": "8080"},
            {"name": "DBWORKER_OPERATOR_METRICS_PORT", "value": "9090"},
            {"name": "DBWORKER_OPERATOR_LOG_LEVEL", "value": "INFO"},
        ],
        "ports": [{"name": "health", "containerPort": 8080, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}, "initialDelaySeconds": 10,
                          "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 4},
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return [
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": NAME, "labels": LABELS}},
        {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(NAME),
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": dict(LABELS)},
                "template": {
                    "metadata": {"labels": dict(LABELS)},
                    "spec": {
                        "serviceAccountName": NAME,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [container],
                        "volumes": [{"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(f"{NAME}-metrics"),
         "spec": {"selector": dict(LABELS),
                  "ports": [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]}},
    ]
