"""Worker objects the k8s tests share: a minimal one and one that sets every field."""

from __future__ import annotations

import copy
from typing import Any


def minimal(name: str = "imgdedup", namespace: str = "apps") -> dict[str, Any]:
    return {
        "apiVersion": "dbworker.dev/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": name, "namespace": namespace, "uid": "0000-uid", "generation": 1},
        "spec": {
            "image": "registry.example/imgdedup:1.0",
            "app": "imgdedup.jobs:coordinator",
            "database": {"urlSecretRef": {"name": "imgdedup-db", "key": "url"}},
        },
    }


def full(name: str = "imgdedup", namespace: str = "apps") -> dict[str, Any]:
    body = minimal(name, namespace)
    body["spec"].update({
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [{"name": "regcred"}],
        "workers": ["hash", "compare"],
        "concurrency": {"hash": 4, "compare": 2},
        "replicas": 3,
        "database": {"urlSecretRef": {"name": "imgdedup-db", "key": "url"}, "envName": "APP_DATABASE_URL"},
        "leaseSeconds": 30,
        "pollSeconds": 0.5,
        "maxPollSeconds": 5,
        "drainSeconds": 60,
        "migrate": True,
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        "env": [{"name": "LOG_LEVEL", "value": "debug"},
                {"name": "APP_DATABASE_URL", "value": "sqlite://"}],  # clashes with ours: dropped
        "envFrom": [{"configMapRef": {"name": "imgdedup-config"}}],
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "tolerations": [{"key": "workers", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": name}}}}]}},
        "serviceAccountName": "imgdedup",
        "podLabels": {"team": "media"},
        "podAnnotations": {"example.com/owner": "media"},
        "metrics": {"port": 9200, "podMonitor": True, "podMonitorLabels": {"release": "kube-prometheus-stack"}},
        "podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                               "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [2000]},
        "containerSecurityContext": {"seccompProfile": {"type": "Localhost",
                                                        "localhostProfile": "profiles/dbworker.json"}},
        "tmpSizeLimit": "2Gi",
        "automountServiceAccountToken": True,
        "disruptionBudget": {"maxUnavailable": 1},
        "autoscaling": {"minReplicas": 2, "maxReplicas": 10, "targetPerSlot": 0.8},
    })
    return body


def scale_to_zero(name: str = "mailer", *, kind: str = "postgresql") -> dict[str, Any]:
    """A Worker behind PgBouncer with a connection budget that scales from zero on the database's count."""
    return with_spec(minimal(name), **{
        "workers": ["emails", "thumbs"],
        "concurrency": {"emails": 8, "thumbs": 8},
        "database": {"urlSecretRef": {"name": f"{name}-db", "key": "url"},
                     **({"listenUrlSecretRef": {"name": f"{name}-db", "key": "direct-url"},
                         "transactionPooler": True} if kind == "postgresql" else {}),
                     "maxConnections": 200},
        "autoscaling": {"minReplicas": 0, "maxReplicas": 20,
                        "database": {"type": kind, "connectionKey": "keda",
                                     "sources": [{"worker": "emails", "table": "outbox"},
                                                 {"worker": "thumbs", "table": "images", "key": "image_id",
                                                  "filter": "uploaded"}]}},
    })


def with_spec(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(body)
    for key, value in changes.items():
        if value is None:
            result["spec"].pop(key, None)
        else:
            result["spec"][key] = value
    return result
