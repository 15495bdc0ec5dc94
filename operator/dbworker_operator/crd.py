"""The Worker CRD and kopf's peering CRDs as data: the one source of their schema, CEL rules, columns.

generate.py writes them to ``operator/manifests/`` and the chart's ``crds/``; a test fails when
a committed copy is stale. ``spec.py`` parses what this schema admitted, with these defaults.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import kinds

SINGULAR = "worker"
SHORT_NAMES = ["dbw"]
CRD_NAME = f"{kinds.WORKER.plural}.{kinds.GROUP}"

# Patterns shared with spec.py, so the API server and the operator agree on what is valid.
APP_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
WORKER_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
PROMETHEUS_URL_PATTERN = r"^https?://[^\s]+$"
# A Worker's name becomes a label value (app.kubernetes.io/instance, KEDA's scaledobject.keda.sh/name)
# and the name of every object it owns: a DNS label, at most 63 characters.
WORKER_OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
WORKER_OBJECT_NAME_MAX = 63
# A percentage the PodDisruptionBudget API accepts: a whole number from 0 to 100, then "%".
PERCENT_PATTERN = r"^(100|[1-9]?[0-9])%$"
# Label keys and values (the PodMonitor's labels, as Kubernetes checks them).
LABEL_KEY_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# resource.Quantity's serialised form (as controller-gen writes it for Quantity fields).
QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
# metav1.Condition's own limits, so the status holds only what `kubectl` tooling expects.
CONDITION_TYPE_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_MESSAGE_MAX = 32768

DEFAULT_REPLICAS = 1
DEFAULT_DRAIN_SECONDS = 25
DEFAULT_METRICS_PORT = 9100
DEFAULT_ENV_NAME = "DATABASE_URL"
DEFAULT_TARGET_PER_SLOT = 1
DEFAULT_POOL_CONNECTIONS = 5  # SQLAlchemy's QueuePool pool_size, the coordinator engine's default
DEFAULT_SOURCE_KEY = "id"
SQL_TRIGGER_TYPES = ("postgresql", "mysql")
# A source table or column the database trigger's query names (quoted by the builder; no dots or quotes).
SQL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"
DEFAULT_PROMETHEUS_ADDRESS = "http://prometheus-operated.monitoring.svc:9090"
DEFAULT_TMP_SIZE_LIMIT = "1Gi"
# The library's own defaults (SPEC.md), used by CEL rules that compare a set field with an unset one.
LIBRARY_POLL_SECONDS = 0.25
LIBRARY_MAX_POLL_SECONDS = 10.0

# Labels a user may not set on pods: the Deployment's selector is built from them.
RESERVED_POD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance")

# spec.console: `dbworker console` as a Deployment and Service named <worker>-console. A Service
# name is a DNS-1035 label (a letter first, at most 63 characters), so the Worker's name must leave room.
CONSOLE_SUFFIX = "-console"
CONSOLE_WORKER_NAME_MAX = WORKER_OBJECT_NAME_MAX - len(CONSOLE_SUFFIX)
CONSOLE_PORT = 8080  # the console container's port (dbworker console --port)
DEFAULT_CONSOLE_REPLICAS = 1
DEFAULT_CONSOLE_SERVICE_PORT = 80
DEFAULT_CONSOLE_SERVICE_TYPE = "ClusterIP"
CONSOLE_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")


def _string_map(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def _free_objects(description: str, *, required: list[str] | None = None) -> dict[str, Any]:
    """An array of Kubernetes core objects we pass through to the pod unchanged."""
    item: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if required:
        item["required"] = required
        item["properties"] = {name: {"type": "string", "minLength": 1} for name in required}
    return {"type": "array", "description": description, "items": item}


def _int_or_string(description: str) -> dict[str, Any]:
    # The exact anyOf form the API server allows for int-or-string; the value check is CEL.
    return {"description": description, "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            # The estimated cost of matches() is bounded by the request size (about 1.6 million
            # units for the largest body, under the API server's 10 million per rule); each
            # field is evaluated once per Worker, never per list item.
            "x-kubernetes-validations": [{
                "rule": f"type(self) == int ? self >= 0 : self.matches('{PERCENT_PATTERN}')",
                "message": "must be a non-negative count or a whole percentage from 0% to 100%, such as 25%",
            }]}


def _seconds(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "exclusiveMinimum": True, "description": description}


def _labels(description: str) -> dict[str, Any]:
    """A map of Kubernetes labels; the keys are checked by the operator (spec.py), since CEL
    regexes over unbounded map keys can exceed the API server's cost budget."""
    return {"type": "object", "description": description, "maxProperties": 32,
            "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}}


def _ids(description: str, *, minimum: int) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": minimum, "maximum": 2**31 - 1,
            "description": description}


def _seccomp() -> dict[str, Any]:
    # `restricted` admits RuntimeDefault and Localhost only (never Unconfined).
    return {
        "type": "object", "required": ["type"],
        "description": "seccomp profile: RuntimeDefault (the default) or a Localhost profile.",
        "properties": {"type": {"type": "string", "enum": ["RuntimeDefault", "Localhost"]},
                       "localhostProfile": {"type": "string", "minLength": 1, "maxLength": 4096}},
        "x-kubernetes-validations": [{
            "rule": "self.type == 'Localhost' ? has(self.localhostProfile) : !has(self.localhostProfile)",
            "message": "seccompProfile.localhostProfile is required with type Localhost, and only with it",
        }],
    }


def pod_security_context_schema() -> dict[str, Any]:
    """The pod securityContext fields a Worker may set: those the `restricted` Pod Security
    Standard still allows (runAsNonRoot stays true; the user is never root)."""
    return {
        "type": "object",
        "description": "Pod securityContext fields allowed under the restricted Pod Security Standard.",
        "properties": {
            "runAsUser": _ids("UID the containers run as (never 0); for images whose USER is a name or root.",
                              minimum=1),
            "runAsGroup": _ids("GID the containers run as.", minimum=0),
            "fsGroup": _ids("GID that owns mounted volumes.", minimum=0),
            "fsGroupChangePolicy": {"type": "string", "enum": ["OnRootMismatch", "Always"]},
            "supplementalGroups": {"type": "array", "maxItems": 32, "x-kubernetes-list-type": "set",
                                   "items": {"type": "integer", "format": "int64", "minimum": 0,
                                             "maximum": 2**31 - 1}},
            "seccompProfile": _seccomp(),
        },
    }


def container_security_context_schema() -> dict[str, Any]:
    """The container securityContext fields a Worker may set (both containers get them); the
    rest stay hardened: no privilege escalation, no capabilities, a read-only root."""
    return {
        "type": "object",
        "description": "Container securityContext fields allowed under the restricted Pod Security Standard.",
        "properties": {
            "runAsUser": _ids("UID of the containers (never 0).", minimum=1),
            "runAsGroup": _ids("GID of the containers.", minimum=0),
            "seccompProfile": _seccomp(),
        },
    }


def autoscaling_schema() -> dict[str, Any]:
    """spec.autoscaling: the KEDA ScaledObject's bounds, target, scale-in pacing, database trigger."""
    return {
        "type": "object", "required": ["maxReplicas"],
        "description": "A KEDA ScaledObject scaling on the work in flight plus waiting per handler slot "
                       "(needs KEDA installed).",
        "properties": {
            # 0 needs the database trigger: with no pods there are no metrics to wake on.
            "minReplicas": {"type": "integer", "minimum": 0, "default": 1},
            "maxReplicas": {"type": "integer", "minimum": 1},
            "targetPerSlot": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                              "default": DEFAULT_TARGET_PER_SLOT,
                              "description": "Items (running plus waiting) per handler slot the fleet is sized "
                                             "for: 1 keeps every slot busy, 0.8 leaves a fifth spare."},
            "prometheusAddress": {"type": "string", "pattern": PROMETHEUS_URL_PATTERN,
                                  "default": DEFAULT_PROMETHEUS_ADDRESS,
                                  "description": "Prometheus that scrapes the workers (KEDA queries it)."},
            "behavior": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "description": "autoscaling/v2 HorizontalPodAutoscalerBehavior (scaleUp, scaleDown) replacing the "
                               "default pacing (scale in by one pod a minute after 5 minutes of less work)."},
            "database": {
                "type": "object", "required": ["type", "connectionKey", "sources"],
                "description": "A second trigger asking the database itself how much is claimable, so the "
                               "fleet wakes from zero pods (KEDA's postgresql or mysql scaler).",
                "properties": {
                    "type": {"type": "string", "enum": list(SQL_TRIGGER_TYPES)},
                    "connectionKey": {
                        "type": "string", "pattern": SECRET_KEY_PATTERN, "maxLength": 253,
                        "description": "Key of the spec.database.urlSecretRef Secret holding KEDA's connection "
                                       "string: libpq (postgresql://user:pw@host:5432/db) or Go MySQL "
                                       "(user:pw@tcp(host:3306)/db), not a SQLAlchemy URL."},
                    "sources": {
                        "type": "array", "minItems": 1, "maxItems": 64, "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["worker"],
                        "items": {
                            "type": "object", "required": ["worker", "table"],
                            "properties": {
                                "worker": {"type": "string", "pattern": WORKER_NAME_PATTERN, "maxLength": 63},
                                "table": {"type": "string", "pattern": SQL_NAME_PATTERN,
                                          "description": "The worker's source table."},
                                "key": {"type": "string", "pattern": SQL_NAME_PATTERN,
                                        "default": DEFAULT_SOURCE_KEY,
                                        "description": "The source table's key column."},
                                "filter": {"type": "string", "maxLength": 2048,
                                           "description": "SQL condition on the source table's columns that "
                                                          "the worker's eligible query applies too."},
                            },
                        },
                    },
                },
            },
        },
        "x-kubernetes-validations": [
            {"rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
             "message": "autoscaling.minReplicas must be <= autoscaling.maxReplicas"},
            {"rule": "!has(self.minReplicas) || self.minReplicas >= 1 || has(self.database)",
             "message": "autoscaling.minReplicas 0 needs autoscaling.database: with no pods only the database "
                        "can say there is work"},
        ],
    }


def console_schema() -> dict[str, Any]:
    """spec.console: the web console (`dbworker console`) as its own Deployment and Service."""
    secret_ref = {"name": {"type": "string", "pattern": SECRET_NAME_PATTERN, "maxLength": 253},
                  "key": {"type": "string", "pattern": SECRET_KEY_PATTERN, "maxLength": 253}}
    quantities = {"type": "object", "additionalProperties": {
        "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}
    return {
        "type": "object",
        "description": f"The web console (`dbworker console`, docs/console.md): a Deployment and a Service "
                       f"named <worker>{CONSOLE_SUFFIX}, the workers' pod settings and database Secret.",
        "properties": {
            "enabled": {"type": "boolean", "default": False},
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100,
                         "default": DEFAULT_CONSOLE_REPLICAS, "description": "Console pods (they share sessions)."},
            "readOnly": {"type": "boolean", "default": False,
                         "description": "Show no action and refuse every action (dbworker console --read-only)."},
            "tokenSecretRef": {
                "type": "object", "required": ["name", "key"], "properties": secret_ref,
                "description": "Secret key holding the sign-in tokens (DBWORKER_CONSOLE_TOKEN: SECRET or "
                               "NAME=SECRET, comma-separated)."},
            "service": {
                "type": "object", "default": {},
                "properties": {
                    "type": {"type": "string", "enum": list(CONSOLE_SERVICE_TYPES),
                             "default": DEFAULT_CONSOLE_SERVICE_TYPE},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                             "default": DEFAULT_CONSOLE_SERVICE_PORT},
                },
            },
            "resources": {"type": "object", "properties": {"limits": quantities, "requests": quantities},
                          "description": "The console container's resources (the workers' spec.resources "
                                         "are for handlers)."},
        },
        "x-kubernetes-validations": [{
            "rule": "!has(self.enabled) || !self.enabled || has(self.tokenSecretRef)",
            "message": "console.tokenSecretRef is required with console.enabled: name the Secret and key "
                       "holding the console's sign-in tokens",
        }],
    }


def console_name_rule() -> dict[str, Any]:
    """With the console on, the Worker's name must make a Service name with the suffix."""
    return {
        "rule": "!has(self.spec.console) || !has(self.spec.console.enabled) || !self.spec.console.enabled || "
                f"(self.metadata.name.size() <= {CONSOLE_WORKER_NAME_MAX} && self.metadata.name.matches('^[a-z]'))",
        "message": f"with spec.console.enabled the Worker's name must start with a letter and have at most "
                   f"{CONSOLE_WORKER_NAME_MAX} characters: its console's Service is named <name>{CONSOLE_SUFFIX}",
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
            "app": {"type": "string", "pattern": APP_PATTERN, "maxLength": 512,
                    "description": "MODULE:ATTR of the application's Coordinator, e.g. `myapp.jobs:coordinator`."},
            "workers": {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 64,
                        "description": "Worker names to run (default: every registered worker).",
                        "items": {"type": "string", "pattern": WORKER_NAME_PATTERN, "maxLength": 63}},
            "concurrency": {
                "type": "object", "description": "Handlers per worker name, each in its own child process.",
                # Key names are checked by the operator (spec.py): CEL regexes over unbounded map
                # keys can exceed the API server's cost budget.
                "maxProperties": 64,
                "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 1024},
            },
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "default": DEFAULT_REPLICAS,
                         "description": "Pods to run (ignored while autoscaling drives the Deployment)."},
            "database": {
                "type": "object", "required": ["urlSecretRef"],
                "description": "Where the pods find the database URL; it only ever comes from a Secret.",
                "properties": {
                    "urlSecretRef": {
                        "type": "object", "required": ["name", "key"],
                        "properties": {
                            "name": {"type": "string", "pattern": SECRET_NAME_PATTERN, "maxLength": 253},
                            "key": {"type": "string", "pattern": SECRET_KEY_PATTERN, "maxLength": 253},
                        },
                    },
                    "envName": {"type": "string", "pattern": ENV_NAME_PATTERN, "default": DEFAULT_ENV_NAME,
                                "description": "Environment variable the application reads the URL from."},
                    "listenUrlSecretRef": {
                        "type": "object", "required": ["name", "key"],
                        "description": "A direct PostgreSQL URL (not the pooler's) for each pod's one LISTEN "
                                       "connection, passed as DBWORKER_LISTEN_URL.",
                        "properties": {
                            "name": {"type": "string", "pattern": SECRET_NAME_PATTERN, "maxLength": 253},
                            "key": {"type": "string", "pattern": SECRET_KEY_PATTERN, "maxLength": 253},
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
                        "type": "integer", "minimum": 0, "maximum": 10000, "default": DEFAULT_POOL_CONNECTIONS,
                        "description": "Connections counted for each pod's coordinator engine: its pool_size "
                                       "(5 by default); add max_overflow (10 by default) to count its worst "
                                       "case."},
                },
            },
            "leaseSeconds": _seconds("Claim lease length (dbworker --lease-seconds)."),
            "pollSeconds": _seconds("First wait after an empty poll (dbworker --poll-seconds)."),
            "maxPollSeconds": _seconds("Longest wait between polls (dbworker --max-poll-seconds)."),
            "drainSeconds": {"type": "integer", "minimum": 0, "maximum": 86400, "default": DEFAULT_DRAIN_SECONDS,
                             "description": "How long a stopping pod lets running handlers finish."},
            "migrate": {"type": "boolean", "default": True,
                        "description": "Run `dbworker migrate` in an init container before the workers start."},
            "resources": {"type": "object", "properties": {"limits": quantities, "requests": quantities}},
            "env": _free_objects("Extra environment variables (core/v1 EnvVar).", required=["name"]),
            "envFrom": _free_objects("Extra environment sources (core/v1 EnvFromSource)."),
            "nodeSelector": _string_map("Node labels the pods must run on."),
            "tolerations": _free_objects("core/v1 Tolerations for the pods."),
            "affinity": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "description": "core/v1 Affinity for the pods."},
            "serviceAccountName": {"type": "string", "pattern": SECRET_NAME_PATTERN, "maxLength": 253},
            "automountServiceAccountToken": {
                "type": "boolean", "default": False,
                "description": "Mount a Kubernetes API token into the pods (only for code that calls the API)."},
            "podSecurityContext": pod_security_context_schema(),
            "containerSecurityContext": container_security_context_schema(),
            "tmpSizeLimit": {
                "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": QUANTITY_PATTERN, "default": DEFAULT_TMP_SIZE_LIMIT,
                "description": "Size limit of the writable /tmp (an emptyDir); past it the pod is evicted."},
            "podLabels": {
                **_string_map("Extra labels for the pods."),
                "x-kubernetes-validations": [{
                    "rule": " && ".join(f"!('{k}' in self)" for k in RESERVED_POD_LABELS),
                    "message": "podLabels may not set app.kubernetes.io/name or app.kubernetes.io/instance "
                               "(the operator's selector uses them)",
                }],
            },
            "podAnnotations": _string_map("Extra annotations for the pods."),
            "metrics": {
                "type": "object", "default": {},
                "properties": {
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": DEFAULT_METRICS_PORT},
                    "podMonitor": {"type": "boolean", "default": False,
                                   "description": "Create a PodMonitor when the Prometheus Operator is installed."},
                    "podMonitorLabels": _labels(
                        "Labels of the PodMonitor, for the Prometheus that should select it (kube-prometheus-stack: "
                        "release: <its release>); added to the operator's defaults."),
                },
            },
            "disruptionBudget": {
                "type": "object",
                "properties": {
                    "minAvailable": _int_or_string("Pods that must stay up (count or percent)."),
                    "maxUnavailable": _int_or_string("Pods that may be down (count or percent)."),
                },
                "x-kubernetes-validations": [{
                    "rule": "has(self.minAvailable) != has(self.maxUnavailable)",
                    "message": "disruptionBudget needs exactly one of minAvailable or maxUnavailable",
                }],
            },
            "autoscaling": autoscaling_schema(),
            "console": console_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"(has(self.maxPollSeconds) ? self.maxPollSeconds : {LIBRARY_MAX_POLL_SECONDS}) >= "
                        f"(has(self.pollSeconds) ? self.pollSeconds : {LIBRARY_POLL_SECONDS})",
                "message": "maxPollSeconds must be >= pollSeconds (defaults 10 and 0.25)",
            },
            {
                "rule": "!has(self.concurrency) || !has(self.workers) || self.concurrency.all(k, k in self.workers)",
                "message": "every concurrency key must be listed in workers (or leave workers unset to run all)",
            },
        ],
    }


def status_schema() -> dict[str, Any]:
    # metav1.Condition: every field but observedGeneration required, with its lengths and patterns.
    condition = {
        "type": "object", "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": {"type": "string", "maxLength": 316, "pattern": CONDITION_TYPE_PATTERN},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": CONDITION_REASON_PATTERN},
            "message": {"type": "string", "maxLength": CONDITION_MESSAGE_MAX},
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
        "rule": f"self.metadata.name.size() <= {WORKER_OBJECT_NAME_MAX} && "
                f"self.metadata.name.matches('{WORKER_OBJECT_NAME_PATTERN}')",
        "message": f"a Worker's name must be a DNS label of at most {WORKER_OBJECT_NAME_MAX} characters "
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
                            "name": {"type": "string", "maxLength": WORKER_OBJECT_NAME_MAX}}},
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
