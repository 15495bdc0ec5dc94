"""The Worker CRD and kopf's peering CRDs as data: the one source of their schema, CEL rules, columns.

generate.py writes them to ``operator/manifests/`` and the chart's ``crds/``; a test fails when
a committed copy is stale. ``spec.py`` parses what this schema admitted, with these defaults.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds, rules, schemas

SINGULAR = "worker"
SHORT_NAMES = ["dbw"]
CRD_NAME = f"{kinds.WORKER.plural}.{kinds.GROUP}"


def console_name_rule() -> dict[str, Any]:
    """With the console on, the Worker's name must make a Service name with the suffix."""
    return {
        "rule": "!has(self.spec.console) || !has(self.spec.console.enabled) || !self.spec.console.enabled || "
                f"(self.metadata.name.size() <= {rules.CONSOLE_WORKER_NAME_MAX} && self.metadata.name.matches('^[a-z]'))",
        "message": f"with spec.console.enabled the Worker's name must start with a letter and have at most "
                   f"{rules.CONSOLE_WORKER_NAME_MAX} characters: its console's Service is named <name>{rules.CONSOLE_SUFFIX}",
    }


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``spec`` (also used by the tests' JSON Schema validator)."""
    quantities = {"type": "object", "additionalProperties": {
        "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}
    return {
        "type": "object",
        "description": "A fleet of `dbworker run` pods for one application.",
        "required": ["image", "app", "database"],
        "properties": {
            "image": {"type": "string", "minLength": 1,
                      "description": "Container image holding the application and dbworker."},
            "imagePullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
            "imagePullSecrets": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string", "minLength": 1}}}},
            "app": {"type": "string", "pattern": rules.APP_PATTERN, "maxLength": 512,
                    "description": "MODULE:ATTR of the application's Coordinator, e.g. `myapp.jobs:coordinator`."},
            "workers": {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 64,
                        "description": "Worker names to run (default: every registered worker).",
                        "items": {"type": "string", "pattern": rules.WORKER_NAME_PATTERN, "maxLength": 63}},
            "concurrency": {
                "type": "object", "description": "Handlers per worker name, each in its own child process.",
                # Key names are checked by the operator (fields.py): CEL regexes over unbounded map
                # keys can exceed the API server's cost budget.
                "maxProperties": 64,
                "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 1024},
            },
            "processes": {
                "type": "object", "maxProperties": 64,
                "description": "Handler processes carrying an async worker's concurrency items, per worker name "
                               "(default 1; a sync worker's must equal its concurrency).",
                "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 1024},
            },
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": rules.MAX_PODS,
                         "default": rules.DEFAULT_REPLICAS,
                         "description": "Pods to run (ignored while autoscaling drives the Deployment)."},
            "database": {
                "type": "object", "required": ["urlSecretRef"],
                "description": "Where the pods find the database URL; it only ever comes from a Secret.",
                "properties": {
                    "urlSecretRef": {
                        "type": "object", "required": ["name", "key"],
                        "properties": {
                            "name": {"type": "string", "pattern": rules.SECRET_NAME_PATTERN, "maxLength": 253},
                            "key": {"type": "string", "pattern": rules.SECRET_KEY_PATTERN, "maxLength": 253},
                        },
                    },
                    "envName": {"type": "string", "pattern": rules.ENV_NAME_PATTERN, "default": rules.DEFAULT_ENV_NAME,
                                "description": "Environment variable the application reads the URL from (not "
                                               "one the loader, Python or dbworker reads).",
                                "x-kubernetes-validations": [schemas.env_name_rule()]},
                    "listenUrlSecretRef": {
                        "type": "object", "required": ["name", "key"],
                        "description": "A direct PostgreSQL URL (not the pooler's) for each pod's one LISTEN "
                                       "connection, passed as DBWORKER_LISTEN_URL.",
                        "properties": {
                            "name": {"type": "string", "pattern": rules.SECRET_NAME_PATTERN, "maxLength": 253},
                            "key": {"type": "string", "pattern": rules.SECRET_KEY_PATTERN, "maxLength": 253},
                        },
                    },
                    "transactionPooler": {
                        "type": "boolean", "default": False,
                        "description": "The URL reaches PostgreSQL through a transaction pooler (PgBouncer "
                                       "pool_mode=transaction): DBWORKER_TRANSACTION_POOLER=true."},
                    "maxConnections": {
                        "type": "integer", "minimum": 1, "maximum": 1000000,
                        "description": "Connections the whole fleet may open; the operator caps autoscaling "
                                       "to fit and reports a ConnectionBudget condition."},
                    "poolConnections": {
                        "type": "integer", "minimum": 0, "maximum": 10000, "default": rules.DEFAULT_POOL_CONNECTIONS,
                        "description": "Connections counted for each pod's coordinator engine: its pool_size "
                                       "(5 by default); add max_overflow (10 by default) to count its worst "
                                       "case."},
                },
            },
            "leaseSeconds": schemas.seconds("Claim lease length (dbworker --lease-seconds)."),
            "pollSeconds": schemas.seconds("First wait after an empty poll (dbworker --poll-seconds)."),
            "maxPollSeconds": schemas.seconds("Longest wait between polls (dbworker --max-poll-seconds)."),
            "drainSeconds": {"type": "integer", "minimum": 0, "maximum": rules.MAX_SECONDS, "default": rules.DEFAULT_DRAIN_SECONDS,
                             "description": "How long a stopping pod lets running handlers finish."},
            "logLevel": {"type": "string", "enum": list(rules.LOG_LEVELS),
                         "description": "Log level of the pods (dbworker --log-level); the command's default is "
                                        "INFO."},
            "wakeupTriggers": {
                "type": "boolean", "default": True,
                "description": "Install the wake-up triggers on each source table (false: "
                               "DBWORKER_NO_WAKEUP_TRIGGERS, for a database role that may not create triggers; "
                               "the workers then find new rows at their next poll)."},
            "migrate": {"type": "boolean", "default": True,
                        "description": "Run `dbworker migrate` in an init container before the workers start."},
            "resources": {"type": "object", "properties": {"limits": quantities, "requests": quantities}},
            "env": schemas.free_objects("Extra environment variables (core/v1 EnvVar); not the dbworker command's "
                                        "own DBWORKER_* ones, which the operator sets from the fields above.",
                                        required=["name"], item_rules=[schemas.env_var_rule()],
                                        max_items=rules.MAX_ENV),
            "envFrom": schemas.free_objects("Extra environment sources (core/v1 EnvFromSource)."),
            "nodeSelector": schemas.string_map("Node labels the pods must run on."),
            "tolerations": schemas.free_objects("core/v1 Tolerations for the pods."),
            "affinity": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "description": "core/v1 Affinity for the pods."},
            "serviceAccountName": {"type": "string", "pattern": rules.SECRET_NAME_PATTERN, "maxLength": 253},
            "automountServiceAccountToken": {
                "type": "boolean", "default": False,
                "description": "Mount a Kubernetes API token into the pods (only for code that calls the API)."},
            "podSecurityContext": schemas.pod_security_context_schema(),
            "containerSecurityContext": schemas.container_security_context_schema(),
            "tmpSizeLimit": {
                "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": rules.QUANTITY_PATTERN, "default": rules.DEFAULT_TMP_SIZE_LIMIT,
                "description": "Size limit of the writable /tmp (an emptyDir); past it the pod is evicted."},
            "podLabels": {
                **schemas.labels("Extra labels for the pods."),
                "x-kubernetes-validations": [{
                    "rule": " && ".join(f"!('{k}' in self)" for k in rules.RESERVED_POD_LABELS),
                    "message": "podLabels may not set app.kubernetes.io/name or app.kubernetes.io/instance "
                               "(the operator's selector uses them)",
                }],
            },
            "podAnnotations": schemas.annotation_map("Extra annotations for the pods."),
            "metrics": {
                "type": "object", "default": {},
                "properties": {
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": rules.DEFAULT_METRICS_PORT},
                    "podMonitor": {"type": "boolean", "default": False,
                                   "description": "Create a PodMonitor when the Prometheus Operator is installed."},
                    "podMonitorLabels": schemas.labels(
                        "Labels of the PodMonitor, for the Prometheus that should select it (kube-prometheus-stack: "
                        "release: <its release>); added to the operator's defaults."),
                },
            },
            "disruptionBudget": {
                "type": "object",
                "properties": {
                    "minAvailable": schemas.int_or_string("Pods that must stay up (count or percent)."),
                    "maxUnavailable": schemas.int_or_string("Pods that may be down (count or percent)."),
                },
                "x-kubernetes-validations": [{
                    "rule": "has(self.minAvailable) != has(self.maxUnavailable)",
                    "message": "disruptionBudget needs exactly one of minAvailable or maxUnavailable",
                }],
            },
            "autoscaling": schemas.autoscaling_schema(),
            "console": schemas.console_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"(has(self.maxPollSeconds) ? self.maxPollSeconds : {rules.LIBRARY_MAX_POLL_SECONDS}) >= "
                        f"(has(self.pollSeconds) ? self.pollSeconds : {rules.LIBRARY_POLL_SECONDS})",
                "message": "maxPollSeconds must be >= pollSeconds (defaults 10 and 0.25)",
            },
            {
                "rule": "!has(self.concurrency) || !has(self.workers) || self.concurrency.all(k, k in self.workers)",
                "message": "every concurrency key must be listed in workers (or leave workers unset to run all)",
            },
            {
                "rule": "!has(self.processes) || !has(self.workers) || self.processes.all(k, k in self.workers)",
                "message": "every processes key must be listed in workers (or leave workers unset to run all)",
            },
        ],
    }


def status_schema() -> dict[str, Any]:
    # metav1.Condition: every field but observedGeneration required, with its lengths and patterns.
    condition = {
        "type": "object", "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": {"type": "string", "maxLength": 316, "pattern": rules.CONDITION_TYPE_PATTERN},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": rules.CONDITION_REASON_PATTERN},
            "message": {"type": "string", "maxLength": rules.CONDITION_MESSAGE_MAX},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }
    return {
        "type": "object",
        "properties": {
            "observedGeneration": {"type": "integer"},
            "replicas": {"type": "integer"},
            "readyReplicas": {"type": "integer"},
            "desiredReplicas": {"type": "integer",
                                "description": "Pods wanted now: KEDA's count while it scales, else spec.replicas."},
            "backlog": {"type": "integer", "description": "Items claimable now, from the pods' dbworker_backlog."},
            "selector": {"type": "string", "description": "Pod label selector (for the scale subresource)."},
            "conditions": {"type": "array", "items": condition,
                           "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
            # kopf may record its own bookkeeping here; keep it out of our typed fields.
            "kopf": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def name_rule() -> dict[str, Any]:
    """The Worker's own name must serve as a label value and as its objects' names."""
    return {
        "rule": f"self.metadata.name.size() <= {rules.WORKER_OBJECT_NAME_MAX} && "
                f"self.metadata.name.matches('{rules.WORKER_OBJECT_NAME_PATTERN}')",
        "message": f"a Worker's name must be a DNS label of at most {rules.WORKER_OBJECT_NAME_MAX} characters "
                   "(lower-case letters, digits and '-'): it is the pods' app.kubernetes.io/instance label",
    }


def worker_crd() -> dict[str, Any]:
    """The CustomResourceDefinition manifest for ``workers.dbworker.dev``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "dbworker"}},
        "spec": {
            "group": kinds.GROUP,
            "scope": "Namespaced",
            "names": {"kind": kinds.WORKER.kind, "listKind": f"{kinds.WORKER.kind}List",
                      "plural": kinds.WORKER.plural, "singular": SINGULAR,
                      "shortNames": SHORT_NAMES, "categories": ["dbworker"]},
            "versions": [{
                "name": kinds.VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A Worker runs `dbworker run <app>` pods against a database.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        # Only name (and generateName) may be constrained here; see name_rule().
                        "metadata": {"type": "object", "properties": {
                            "name": {"type": "string", "maxLength": rules.WORKER_OBJECT_NAME_MAX}}},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                    "x-kubernetes-validations": [name_rule(), console_name_rule()],
                }},
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                              "labelSelectorPath": ".status.selector"},
                },
                "additionalPrinterColumns": [
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
                    {"name": "Backlog", "type": "integer", "jsonPath": ".status.backlog"},
                    {"name": "Degraded", "type": "string", "priority": 1,
                     "jsonPath": ".status.conditions[?(@.type==\"Degraded\")].reason"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }],
        },
    }


def _peering_crd(*, kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
            }],
        },
    }


def peering_crds() -> list[dict[str, Any]]:
    """kopf's peering CRDs (so two operator replicas never both act)."""
    return [
        _peering_crd(kind="ClusterKopfPeering", plural="clusterkopfpeerings", scope="Cluster"),
        _peering_crd(kind="KopfPeering", plural="kopfpeerings", scope="Namespaced"),
    ]
