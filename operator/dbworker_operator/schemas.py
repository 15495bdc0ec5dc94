"""The larger sections of a Worker's spec schema (security contexts, autoscaling, console) and
the small node builders crd.py's spec schema is made of. Data only: dicts of OpenAPI v3 and CEL.
"""

from __future__ import annotations

from typing import Any

from dbworker_operator import rules


def string_map(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def free_objects(description: str, *, required: list[str] | None = None,
                 item_rules: list[dict[str, str]] | None = None, max_items: int | None = None) -> dict[str, Any]:
    """An array of Kubernetes core objects we pass through to the pod unchanged (``item_rules``:
    CEL rules each item must pass)."""
    item: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if required:
        item["required"] = required
        item["properties"] = {name: {"type": "string", "minLength": 1} for name in required}
    if item_rules:
        item["x-kubernetes-validations"] = item_rules
    return {"type": "array", "description": description, "items": item,
            **({"maxItems": max_items} if max_items is not None else {})}


def int_or_string(description: str) -> dict[str, Any]:
    # The exact anyOf form the API server allows for int-or-string; the value check is CEL.
    return {"description": description, "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            # The estimated cost of matches() is bounded by the request size (about 1.6 million
            # units for the largest body, under the API server's 10 million per rule); each
            # field is evaluated once per Worker, never per list item.
            "x-kubernetes-validations": [{
                "rule": f"type(self) == int ? self >= 0 && self <= {rules.MAX_PODS} : "
                        f"self.matches('{rules.PERCENT_PATTERN}')",
                "message": "must be a non-negative count or a whole percentage from 0% to 100%, such as 25% "
                           f"(a count of at most {rules.MAX_PODS} pods)",
            }]}


def seconds(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": rules.MAX_SECONDS,
            "description": f"{description} More than 0, at most {rules.MAX_SECONDS} (one day)."}


def labels(description: str) -> dict[str, Any]:
    """A map of Kubernetes labels; the keys are checked by the operator (fields.py), since CEL
    regexes over unbounded map keys can exceed the API server's cost budget."""
    return {"type": "object", "description": description, "maxProperties": rules.MAX_LABELS,
            "additionalProperties": {"type": "string", "maxLength": 63, "pattern": rules.LABEL_VALUE_PATTERN}}


def annotation_map(description: str) -> dict[str, Any]:
    """A map of annotations, bounded in count and value size; the keys are checked by the
    operator (fields.py) for the same reason as labels'."""
    return {"type": "object", "maxProperties": rules.MAX_POD_ANNOTATIONS,
            "description": f"{description} At most {rules.MAX_POD_ANNOTATIONS}, each value at most "
                           f"{rules.MAX_ANNOTATION_VALUE} characters.",
            "additionalProperties": {"type": "string", "maxLength": rules.MAX_ANNOTATION_VALUE}}


def env_var_rule() -> dict[str, str]:
    """spec.env may not set the `dbworker` command's own variables (rules.DBWORKER_VARIABLES)."""
    fields = sorted({f for f in rules.DBWORKER_VARIABLES.values() if f and not f.startswith("spec.console")})
    return {"rule": f"!self.name.startsWith('{rules.DBWORKER_ENV_PREFIX}')",
            "message": f"spec.env may not set {rules.DBWORKER_ENV_PREFIX}* variables: the operator sets them from "
                       f"the Worker's fields ({', '.join(fields)}, spec.console); set those instead"}


def env_name_rule() -> dict[str, str]:
    """spec.database.envName may not name a variable the loader, Python or dbworker reads."""
    # Several lines (a literal block in the YAML, each line short enough for yamllint).
    starts = " &&\n".join(f"!self.startsWith('{p}')" for p in rules.STARTUP_ENV_PREFIXES)
    names = rules.STARTUP_ENV_NAMES
    listed = ",\n  ".join(", ".join(f"'{n}'" for n in names[i:i + 4]) for i in range(0, len(names), 4))
    return {"rule": f"{starts} &&\n!(self in [\n  {listed}])",
            "message": "database.envName may not name a variable the loader, Python or dbworker reads ("
                       + ", ".join(f"{p}*" for p in rules.STARTUP_ENV_PREFIXES) + ", "
                       + ", ".join(rules.STARTUP_ENV_NAMES)
                       + "): keep DATABASE_URL or name the variable your application reads the URL from"}


def ids(description: str, *, minimum: int) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": minimum, "maximum": 2**31 - 1,
            "description": description}


def seccomp() -> dict[str, Any]:
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
            "runAsUser": ids("UID the containers run as (never 0); for images whose USER is a name or root.",
                              minimum=1),
            "runAsGroup": ids("GID the containers run as.", minimum=0),
            "fsGroup": ids("GID that owns mounted volumes.", minimum=0),
            "fsGroupChangePolicy": {"type": "string", "enum": ["OnRootMismatch", "Always"]},
            "supplementalGroups": {"type": "array", "maxItems": 32, "x-kubernetes-list-type": "set",
                                   "items": {"type": "integer", "format": "int64", "minimum": 0,
                                             "maximum": 2**31 - 1}},
            "seccompProfile": seccomp(),
        },
    }


def container_security_context_schema() -> dict[str, Any]:
    """The container securityContext fields a Worker may set (both containers get them); the
    rest stay hardened: no privilege escalation, no capabilities, a read-only root."""
    return {
        "type": "object",
        "description": "Container securityContext fields allowed under the restricted Pod Security Standard.",
        "properties": {
            "runAsUser": ids("UID of the containers (never 0).", minimum=1),
            "runAsGroup": ids("GID of the containers.", minimum=0),
            "seccompProfile": seccomp(),
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
            "minReplicas": {"type": "integer", "minimum": 0, "maximum": rules.MAX_PODS, "default": 1},
            "maxReplicas": {"type": "integer", "minimum": 1, "maximum": rules.MAX_PODS},
            "targetPerSlot": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                              "maximum": rules.MAX_TARGET_PER_SLOT,
                              "default": rules.DEFAULT_TARGET_PER_SLOT,
                              "description": "Items (running plus waiting) per handler slot the fleet is sized "
                                             "for: 1 keeps every slot busy, 0.8 leaves a fifth spare."},
            "prometheusAddress": {"type": "string", "pattern": rules.PROMETHEUS_URL_PATTERN,
                                  "default": rules.DEFAULT_PROMETHEUS_ADDRESS,
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
                    "type": {"type": "string", "enum": list(rules.SQL_TRIGGER_TYPES)},
                    "connectionKey": {
                        "type": "string", "pattern": rules.SECRET_KEY_PATTERN, "maxLength": 253,
                        "description": "Key of the spec.database.urlSecretRef Secret holding KEDA's connection "
                                       "string: libpq (postgresql://user:pw@host:5432/db) or Go MySQL "
                                       "(user:pw@tcp(host:3306)/db), not a SQLAlchemy URL."},
                    "sources": {
                        "type": "array", "minItems": 1, "maxItems": 64, "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["worker"],
                        "items": {
                            "type": "object", "required": ["worker", "table"],
                            "properties": {
                                "worker": {"type": "string", "pattern": rules.WORKER_NAME_PATTERN, "maxLength": 63},
                                "table": {"type": "string", "pattern": rules.SQL_NAME_PATTERN,
                                          "description": "The worker's source table."},
                                "key": {"type": "string", "pattern": rules.SQL_NAME_PATTERN,
                                        "default": rules.DEFAULT_SOURCE_KEY,
                                        "description": "The source table's key column."},
                                "filter": {"type": "string", "maxLength": rules.MAX_SQL_FILTER,
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
    secret_ref = {"name": {"type": "string", "pattern": rules.SECRET_NAME_PATTERN, "maxLength": 253},
                  "key": {"type": "string", "pattern": rules.SECRET_KEY_PATTERN, "maxLength": 253}}
    quantities = {"type": "object", "additionalProperties": {
        "x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}
    return {
        "type": "object",
        "description": f"The web console (`dbworker console`, docs/console.md): a Deployment and a Service "
                       f"named <worker>{rules.CONSOLE_SUFFIX}, the workers' pod settings and database Secret.",
        "properties": {
            "enabled": {"type": "boolean", "default": False},
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 100,
                         "default": rules.DEFAULT_CONSOLE_REPLICAS, "description": "Console pods (they share sessions)."},
            "readOnly": {"type": "boolean", "default": False,
                         "description": "Show no action and refuse every action (dbworker console --read-only)."},
            "tokenSecretRef": {
                "type": "object", "required": ["name", "key"], "properties": secret_ref,
                "description": "Secret key holding the sign-in tokens (DBWORKER_CONSOLE_TOKEN: SECRET or "
                               "NAME=SECRET, comma-separated)."},
            "service": {
                "type": "object", "default": {},
                "properties": {
                    "type": {"type": "string", "enum": list(rules.CONSOLE_SERVICE_TYPES),
                             "default": rules.DEFAULT_CONSOLE_SERVICE_TYPE},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                             "default": rules.DEFAULT_CONSOLE_SERVICE_PORT},
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

