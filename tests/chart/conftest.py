"""Shared pieces of the chart tests: the chart's paths, rendering with Helm's own engine
(helm-python-sdk, no cluster), and a values set with every option turned on.

Rendering, linting and schema checks live in test_render.py; rules in test_rules.py;
dashboards in test_dashboards.py; the live worker and Prometheus in test_live_metrics.py.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dbworker-operator"
RULES = CHART / "rules" / "dbworker-alerts.yaml"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
RUNBOOKS = REPO / "docs" / "runbooks"
RELEASE = "dbw"
NAMESPACE = "ops"

WORKER_SPEC: dict[str, Any] = {
    "image": "registry.example.com/shop:1.4.2",
    "app": "shop.jobs:coordinator",
    "workers": ["thumbnails", "invoices"],
    "concurrency": {"thumbnails": 4},
    "replicas": 2,
    "database": {"urlSecretRef": {"name": "shop-db", "key": "url"}},
    "drainSeconds": 60,
    "metrics": {"podMonitor": True},
}

# Every optional part of the chart switched on, namespaced RBAC over two namespaces.
ALL_ON: dict[str, Any] = {
    "replicaCount": 1,
    "imagePullSecrets": [{"name": "regcred"}],
    "watch": {"scope": "namespaced", "namespaces": ["shop", NAMESPACE]},
    "peering": {"priority": 100},
    "logLevel": "DEBUG",
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "podLabels": {"team": "payments"},
    "podAnnotations": {"example.com/owner": "payments"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                ]
            }
        }
    },
    "priorityClassName": "system-cluster-critical",
    "serviceAccount": {"annotations": {"example.com/role": "dbworker-operator"}},
    "service": {"annotations": {"prometheus.io/scrape": "true"}},
    "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {
        "enabled": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
        "ruleLabels": {"team": "payments"},
        "runbookBaseUrl": "https://docs.example.com/dbworker/runbooks/",
    },
    "dashboards": {"enabled": True, "annotations": {"grafana_folder": "dbworker"}},
    "workers": [
        {"name": "shop", "namespace": "shop", "labels": {"tier": "batch"},
         "spec": {**WORKER_SPEC, "console": {"enabled": True, "readOnly": True,
                                             "tokenSecretRef": {"name": "shop-console", "key": "tokens"}}},
         "consoleIngress": {"enabled": True, "className": "nginx", "host": "jobs.shop.example.com",
                            "tlsSecretName": "jobs-shop-tls",
                            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}}},
        # Behind PgBouncer, a connection budget, scaling from zero on the database's count.
        {"name": "mail", "spec": {
            **WORKER_SPEC, "workers": ["mail"], "concurrency": {"mail": 2},
            "database": {"urlSecretRef": {"name": "mail-db", "key": "url"}, "transactionPooler": True,
                         "listenUrlSecretRef": {"name": "mail-db", "key": "direct-url"}, "maxConnections": 100},
            "autoscaling": {"minReplicas": 0, "maxReplicas": 8, "targetPerSlot": 0.8,
                            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}},
                            "database": {"type": "postgresql", "connectionKey": "keda",
                                         "sources": [{"worker": "mail", "table": "outgoing_mail"}]}}}},
    ],
    "tests": {"image": "python:3.12-slim"},
    "secretChecks": {"namespaces": ["shop"]},
    "podMonitor": {"labels": {"release": "kube-prometheus-stack", "team": "payments"}},
    "networkPolicy": {"enabled": True},
}


def all_on() -> dict[str, Any]:
    """A fresh deep copy of ALL_ON, safe to modify in one test."""
    return copy.deepcopy(ALL_ON)


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Render like `helm install` (schema checked) -> {template path: [objects]}."""
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    out: dict[str, list[dict[str, Any]]] = {}
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            continue
        out[path] = [doc for doc in yaml.safe_load_all(text) if doc]
    return out


def objects(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every rendered object, in template order."""
    return [obj for docs in render(chart, values).values() for obj in docs]


def notes(chart: helm.Chart, values: dict[str, Any] | None = None) -> str:
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD the chart ships in crds/."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                api_version = f"{spec['group']}/{version['name']}"
                schemas[(api_version, spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return schemas
