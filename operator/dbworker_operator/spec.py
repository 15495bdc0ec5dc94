"""A Worker's ``spec`` dict -> a frozen ``WorkerSpec`` with every default filled in.

The API server already enforced the CRD schema (crd.py); this module re-checks what the
schema cannot express and what an old CRD might have let through, so builders can trust
their input. Every error names the spec path and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dbworker_operator import crd

# Extra pods a rollout runs beside the wanted ones (the Deployment's maxSurge, builders/deployment.py).
ROLLOUT_SURGE = 1


class SpecError(ValueError):
    """A Worker spec the operator cannot build from; the message names the field and the fix."""


@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class SqlSource:
    """A worker's source table, for the database trigger's claimable count."""

    worker: str
    table: str
    key: str = crd.DEFAULT_SOURCE_KEY
    filter: str | None = None


@dataclass(frozen=True)
class DatabaseTrigger:
    """spec.autoscaling.database: KEDA's postgresql or mysql scaler, credentials from the Worker's Secret."""

    type: str
    connection_key: str
    sources: tuple[SqlSource, ...]


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int
    max_replicas: int
    prometheus_address: str
    target_per_slot: float = crd.DEFAULT_TARGET_PER_SLOT
    behavior: Mapping[str, Any] | None = None  # None: the builder's default pacing
    database: DatabaseTrigger | None = None


@dataclass(frozen=True)
class DisruptionBudget:
    min_available: int | str | None
    max_unavailable: int | str | None


@dataclass(frozen=True)
class ConsoleSpec:
    """spec.console, when enabled: `dbworker console` pods behind a Service (builders/console.py)."""

    token_secret: SecretRef
    replicas: int = crd.DEFAULT_CONSOLE_REPLICAS
    read_only: bool = False
    service_type: str = crd.DEFAULT_CONSOLE_SERVICE_TYPE
    service_port: int = crd.DEFAULT_CONSOLE_SERVICE_PORT
    resources: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything the builders need, typed and defaulted. Pass-through pod fields stay dicts."""

    name: str
    namespace: str
    image: str
    app: str
    secret: SecretRef
    env_name: str = crd.DEFAULT_ENV_NAME
    listen_secret: SecretRef | None = None  # spec.database.listenUrlSecretRef
    transaction_pooler: bool = False
    max_connections: int | None = None
    pool_connections: int = crd.DEFAULT_POOL_CONNECTIONS
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    concurrency: tuple[tuple[str, int], ...] = ()
    replicas: int = crd.DEFAULT_REPLICAS
    lease_seconds: float | None = None
    poll_seconds: float | None = None
    max_poll_seconds: float | None = None
    drain_seconds: int = crd.DEFAULT_DRAIN_SECONDS
    migrate: bool = True
    metrics_port: int = crd.DEFAULT_METRICS_PORT
    pod_monitor: bool = False
    disruption_budget: DisruptionBudget | None = None
    autoscaling: Autoscaling | None = None
    service_account_name: str | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()
    env_from: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    # The PodMonitor's labels: the operator's defaults, then the Worker's own.
    pod_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    pod_security_context: Mapping[str, Any] = field(default_factory=dict)
    container_security_context: Mapping[str, Any] = field(default_factory=dict)
    tmp_size_limit: str = crd.DEFAULT_TMP_SIZE_LIMIT
    automount_service_account_token: bool = False
    console: ConsoleSpec | None = None  # None: no console (spec.console absent or not enabled)

    @property
    def connections_per_pod(self) -> int:
        """The connections one pod opens (README, "Connection budget"): one per handler process,
        the coordinator engine's pool, and PostgreSQL's one LISTEN connection (none on MySQL, as
        the database trigger's type says, nor behind a transaction pooler without a listen URL:
        those pods poll)."""
        handlers = sum(n for _, n in self.concurrency)
        mysql = self.autoscaling is not None and self.autoscaling.database is not None and \
            self.autoscaling.database.type == "mysql"
        polls = mysql or (self.transaction_pooler and self.listen_secret is None)
        return handlers + self.pool_connections + (0 if polls else 1)


def _get(spec: Mapping[str, Any], path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """Read ``spec.<path>`` (dotted), checking its type; ``default`` when absent or null."""
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return default
        node = node.get(part)
        if node is None:
            return default
    # bool is an int in Python; a count given as true/false is a mistake, not a 1/0.
    if isinstance(node, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise SpecError(f"spec.{path}: expected {_kind_name(kind)}, got a boolean")
    if not isinstance(node, kind):
        raise SpecError(f"spec.{path}: expected {_kind_name(kind)}, got {type(node).__name__}")
    return node


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
             dict: "an object", list: "a list", Mapping: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _required(spec: Mapping[str, Any], path: str, fix: str) -> str:
    value = _get(spec, path, str)
    if not value:
        raise SpecError(f"spec.{path} is required: {fix}")
    return str(value)


def _count(spec: Mapping[str, Any], path: str, *, minimum: int, default: int | None) -> int | None:
    value = _get(spec, path, int, default)
    if value is not None and value < minimum:
        raise SpecError(f"spec.{path} is {value}; it must be >= {minimum}")
    return value  # type: ignore[no-any-return]


def _seconds(spec: Mapping[str, Any], path: str) -> float | None:
    value = _get(spec, path, (int, float))
    if value is not None and value <= 0:
        raise SpecError(f"spec.{path} is {value}; it must be > 0 seconds")
    return None if value is None else float(value)


def _objects(spec: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], ...]:
    items = _get(spec, path, list, [])
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise SpecError(f"spec.{path}[{i}]: expected an object, got {type(item).__name__}")
    return tuple(items)


def _string_map(spec: Mapping[str, Any], path: str) -> dict[str, str]:
    values = _get(spec, path, Mapping, {})
    for key, value in values.items():
        if not isinstance(value, str):
            raise SpecError(f"spec.{path}.{key}: expected a string, got {type(value).__name__}")
    return dict(values)


def _worker_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not re.match(crd.WORKER_NAME_PATTERN, value):
        raise SpecError(f"spec.{path}: {value!r} is not a worker name; use [a-z][a-z0-9_]*")
    return value


def valid_label_key(key: str) -> bool:
    return len(key) <= 316 and re.match(crd.LABEL_KEY_PATTERN, key) is not None


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and re.match(crd.LABEL_VALUE_PATTERN, value) is not None


def _labels(spec: Mapping[str, Any], path: str) -> dict[str, str]:
    labels = _string_map(spec, path)
    for key, value in labels.items():
        if not valid_label_key(key):
            raise SpecError(f"spec.{path}: {key!r} is not a label key; use [prefix/]name, e.g. release")
        if not valid_label_value(value):
            raise SpecError(f"spec.{path}.{key}: {value!r} is not a label value (at most 63 letters, digits, -_.)")
    return labels


def _budget_value(spec: Mapping[str, Any], path: str) -> int | str | None:
    value = _get(spec, path, (int, str))
    if isinstance(value, int) and value < 0:
        raise SpecError(f"spec.{path} is {value}; use a count >= 0 or a percentage such as 25%")
    if isinstance(value, str) and not re.match(crd.PERCENT_PATTERN, value):
        raise SpecError(f"spec.{path}: {value!r} is not a whole percentage from 0% to 100%, such as 25%")
    return value  # type: ignore[no-any-return]


# Which securityContext fields a Worker may set (crd.py's schemas), and their minimum values.
_ID_FIELDS = {"runAsUser": 1, "runAsGroup": 0, "fsGroup": 0}


def _security_context(spec: Mapping[str, Any], path: str, allowed: Mapping[str, Any]) -> dict[str, Any]:
    """A securityContext with only the fields ``allowed`` (a schema's properties), values checked."""
    context = dict(_get(spec, path, Mapping, {}))
    for key, value in context.items():
        if key not in allowed:
            raise SpecError(f"spec.{path}.{key} cannot be set: the pods keep the restricted Pod Security "
                            f"Standard; use one of {', '.join(sorted(allowed))}")
        if key in _ID_FIELDS and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < _ID_FIELDS[key]):
            raise SpecError(f"spec.{path}.{key}: {value!r} must be an integer >= {_ID_FIELDS[key]}"
                            + (" (never root)" if key == "runAsUser" else ""))
        if key == "seccompProfile":
            profile = value if isinstance(value, Mapping) else {}
            if profile.get("type") not in ("RuntimeDefault", "Localhost") or \
                    (profile.get("type") == "Localhost") != bool(profile.get("localhostProfile")):
                raise SpecError(f"spec.{path}.seccompProfile: use {{type: RuntimeDefault}} or "
                                "{type: Localhost, localhostProfile: <file>}")
    return context


def _quantity(spec: Mapping[str, Any], path: str, default: str) -> str:
    value = _get(spec, path, (int, str), default)
    text = str(value)
    if not re.match(crd.QUANTITY_PATTERN, text):
        raise SpecError(f"spec.{path}: {text!r} is not a quantity such as 512Mi or 2Gi")
    return text


def _name(meta: Mapping[str, Any]) -> str:
    name = str(meta.get("name") or "")
    if len(name) > crd.WORKER_OBJECT_NAME_MAX or not re.match(crd.WORKER_OBJECT_NAME_PATTERN, name):
        raise SpecError(f"metadata.name: {name!r} cannot name the Worker's pods and objects; use a DNS label "
                        f"of at most {crd.WORKER_OBJECT_NAME_MAX} characters (recreate the Worker under it)")
    return name


def _sources(spec: Mapping[str, Any], path: str, workers: tuple[str, ...]) -> tuple[SqlSource, ...]:
    found: list[SqlSource] = []
    for i, item in enumerate(_objects(spec, path)):
        where = f"{path}[{i}]"
        worker = _worker_name(item.get("worker"), f"{where}.worker")
        if workers and worker not in workers:
            raise SpecError(f"spec.{where}.worker: {worker!r} is not in spec.workers; add it there or remove it")
        if any(source.worker == worker for source in found):
            raise SpecError(f"spec.{where}.worker: {worker!r} is listed twice; keep one entry")
        names = {}
        for name, default in (("table", None), ("key", crd.DEFAULT_SOURCE_KEY)):
            value = item.get(name, default)
            if not isinstance(value, str) or not re.match(crd.SQL_NAME_PATTERN, value):
                raise SpecError(f"spec.{where}.{name}: {value!r} is not a plain SQL name; use letters, digits "
                                "and _ (the table and column as created, unquoted)")
            names[name] = value
        condition = item.get("filter")
        if condition is not None and (not isinstance(condition, str) or not condition.strip()
                                      or ";" in condition or "--" in condition or "/*" in condition):
            raise SpecError(f"spec.{where}.filter: use one SQL condition on the source table's columns, "
                            "without ; or comments (e.g. ready AND NOT archived)")
        found.append(SqlSource(worker, names["table"], names["key"], condition))
    return tuple(found)


def _autoscaling(spec: Mapping[str, Any], workers: tuple[str, ...]) -> Autoscaling | None:
    if _get(spec, "autoscaling", Mapping) is None:
        return None
    max_replicas = _count(spec, "autoscaling.maxReplicas", minimum=1, default=None)
    if max_replicas is None:
        raise SpecError("spec.autoscaling.maxReplicas is required when autoscaling is set")
    min_replicas = _count(spec, "autoscaling.minReplicas", minimum=0, default=1) or 0
    if min_replicas > max_replicas:
        raise SpecError("spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas")
    target = _get(spec, "autoscaling.targetPerSlot", (int, float), crd.DEFAULT_TARGET_PER_SLOT)
    if target <= 0:
        raise SpecError(f"spec.autoscaling.targetPerSlot is {target}; use a number of items per slot > 0, e.g. 1")
    database = None
    if _get(spec, "autoscaling.database", Mapping) is not None:
        kind = _get(spec, "autoscaling.database.type", str)
        if kind not in crd.SQL_TRIGGER_TYPES:
            raise SpecError(f"spec.autoscaling.database.type: {kind!r}; use postgresql or mysql (the database "
                            "behind spec.database.urlSecretRef)")
        key = _required(spec, "autoscaling.database.connectionKey",
                        "name the key of the spec.database.urlSecretRef Secret holding KEDA's connection string")
        if not re.match(crd.SECRET_KEY_PATTERN, key):
            raise SpecError(f"spec.autoscaling.database.connectionKey: {key!r} is not a Secret key")
        sources = _sources(spec, "autoscaling.database.sources", workers)
        if not sources:
            raise SpecError("spec.autoscaling.database.sources: list each worker's source table")
        database = DatabaseTrigger(kind, key, sources)
    if min_replicas == 0:
        if database is None:
            raise SpecError("spec.autoscaling.minReplicas 0 needs spec.autoscaling.database: with no pods only "
                            "the database can say there is work")
        missing = [w for w in workers if w not in {s.worker for s in database.sources}]
        if not workers or missing:
            raise SpecError("spec.autoscaling.minReplicas 0 needs spec.workers, each with an entry in "
                            "spec.autoscaling.database.sources, so any worker's work wakes the fleet"
                            + (f": add one for {missing[0]!r}" if missing else ""))
    return Autoscaling(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        prometheus_address=_get(spec, "autoscaling.prometheusAddress", str, crd.DEFAULT_PROMETHEUS_ADDRESS),
        target_per_slot=float(target),
        behavior=_get(spec, "autoscaling.behavior", Mapping),
        database=database,
    )


def _console(spec: Mapping[str, Any], name: str) -> ConsoleSpec | None:
    if not _get(spec, "console.enabled", bool, False):
        return None
    if len(name) > crd.CONSOLE_WORKER_NAME_MAX or not name[:1].isalpha():
        raise SpecError(f"metadata.name: {name!r} cannot name the console's Service {name}{crd.CONSOLE_SUFFIX} "
                        f"(a letter first, at most {crd.CONSOLE_WORKER_NAME_MAX} characters before the suffix): "
                        "recreate the Worker under a shorter name or set spec.console.enabled to false")
    if _get(spec, "console.tokenSecretRef", Mapping) is None:
        raise SpecError("spec.console.tokenSecretRef is required with spec.console.enabled: name the Secret and "
                        "key holding the sign-in tokens (SECRET or NAME=SECRET, comma-separated)")
    token = SecretRef(
        _required(spec, "console.tokenSecretRef.name", "name the Secret holding the console's sign-in tokens"),
        _required(spec, "console.tokenSecretRef.key", "name the key of that Secret holding the tokens"))
    service_type = _get(spec, "console.service.type", str, crd.DEFAULT_CONSOLE_SERVICE_TYPE)
    if service_type not in crd.CONSOLE_SERVICE_TYPES:
        raise SpecError(f"spec.console.service.type: {service_type!r}; use one of "
                        f"{', '.join(crd.CONSOLE_SERVICE_TYPES)}")
    port = _count(spec, "console.service.port", minimum=1, default=crd.DEFAULT_CONSOLE_SERVICE_PORT)
    if port is None or port > 65535:
        raise SpecError(f"spec.console.service.port is {port}; use a port from 1 to 65535")
    return ConsoleSpec(
        token_secret=token,
        replicas=_count(spec, "console.replicas", minimum=0, default=crd.DEFAULT_CONSOLE_REPLICAS) or 0,
        read_only=_get(spec, "console.readOnly", bool, False),
        service_type=service_type,
        service_port=port,
        resources=dict(_get(spec, "console.resources", Mapping, {})),
    )


def parse(body: Mapping[str, Any], *, pod_monitor_labels: Mapping[str, str] | None = None) -> WorkerSpec:
    """Build a ``WorkerSpec`` from a Worker object (``metadata`` and ``spec``).

    ``pod_monitor_labels`` are the operator's default PodMonitor labels; the Worker's own
    ``metrics.podMonitorLabels`` win over them. Raises ``SpecError`` naming the first bad
    field and how to fix it.
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError("spec is required: give the Worker a spec with image, app and database")
    name = _name(meta)
    app = _required(spec, "app", "set it to MODULE:ATTR of your Coordinator, e.g. myapp.jobs:coordinator")
    if not re.match(crd.APP_PATTERN, app):
        raise SpecError(f"spec.app: {app!r} is not MODULE:ATTR; e.g. myapp.jobs:coordinator")
    image = _required(spec, "image", "set it to the image that holds your application and dbworker")
    secret_name = _required(spec, "database.urlSecretRef.name", "name the Secret holding the database URL")
    secret_key = _required(spec, "database.urlSecretRef.key", "name the key of that Secret holding the URL")
    env_name = _get(spec, "database.envName", str, crd.DEFAULT_ENV_NAME)
    if not re.match(crd.ENV_NAME_PATTERN, env_name):
        raise SpecError(f"spec.database.envName: {env_name!r} is not an environment variable name")

    workers = tuple(_worker_name(w, f"workers[{i}]") for i, w in enumerate(_get(spec, "workers", list, [])))
    concurrency: list[tuple[str, int]] = []
    for key, value in sorted(_get(spec, "concurrency", Mapping, {}).items()):
        _worker_name(key, f"concurrency.{key}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"spec.concurrency.{key}: {value!r} must be an integer >= 1")
        if workers and key not in workers:
            raise SpecError(f"spec.concurrency.{key}: {key!r} is not in spec.workers; add it there or remove it")
        concurrency.append((key, value))

    poll = _seconds(spec, "pollSeconds")
    max_poll = _seconds(spec, "maxPollSeconds")
    if (max_poll or crd.LIBRARY_MAX_POLL_SECONDS) < (poll or crd.LIBRARY_POLL_SECONDS):
        raise SpecError("spec.maxPollSeconds must be >= spec.pollSeconds (defaults 10 and 0.25)")

    budget = None
    if _get(spec, "disruptionBudget", Mapping) is not None:
        min_available = _budget_value(spec, "disruptionBudget.minAvailable")
        max_unavailable = _budget_value(spec, "disruptionBudget.maxUnavailable")
        if (min_available is None) == (max_unavailable is None):
            raise SpecError("spec.disruptionBudget needs exactly one of minAvailable or maxUnavailable")
        budget = DisruptionBudget(min_available, max_unavailable)

    autoscaling = _autoscaling(spec, workers)
    listen_secret = None
    if _get(spec, "database.listenUrlSecretRef", Mapping) is not None:
        listen_secret = SecretRef(
            _required(spec, "database.listenUrlSecretRef.name", "name the Secret holding the direct LISTEN URL"),
            _required(spec, "database.listenUrlSecretRef.key", "name the key of that Secret holding the URL"))
    transaction_pooler = _get(spec, "database.transactionPooler", bool, False)
    if autoscaling and autoscaling.database and autoscaling.database.type == "mysql" and \
            (listen_secret or transaction_pooler):
        raise SpecError("spec.database.listenUrlSecretRef and transactionPooler are for PostgreSQL; "
                        "spec.autoscaling.database.type says mysql: remove them or fix the type")
    max_connections = _count(spec, "database.maxConnections", minimum=1, default=None)
    if max_connections is not None:
        unknown = [w for w in workers if w not in dict(concurrency)]
        if not workers or unknown:
            raise SpecError("spec.database.maxConnections needs spec.workers and a spec.concurrency entry for "
                            "each (the operator counts one connection per handler process)"
                            + (f": add spec.concurrency.{unknown[0]}" if unknown else ": list spec.workers"))

    pod_labels = _string_map(spec, "podLabels")
    for reserved in crd.RESERVED_POD_LABELS:
        if reserved in pod_labels:
            raise SpecError(f"spec.podLabels.{reserved}: reserved for the operator's selector; remove it")

    pull_secrets = []
    for i, ref in enumerate(_objects(spec, "imagePullSecrets")):
        if not isinstance(ref.get("name"), str) or not ref["name"]:
            raise SpecError(f"spec.imagePullSecrets[{i}].name is required")
        pull_secrets.append(ref["name"])

    parsed = WorkerSpec(
        name=name,
        namespace=str(meta.get("namespace") or ""),
        image=image,
        app=app,
        secret=SecretRef(secret_name, secret_key),
        env_name=env_name,
        listen_secret=listen_secret,
        transaction_pooler=transaction_pooler,
        max_connections=max_connections,
        pool_connections=_count(spec, "database.poolConnections", minimum=0,
                                default=crd.DEFAULT_POOL_CONNECTIONS) or 0,
        image_pull_policy=_get(spec, "imagePullPolicy", str),
        image_pull_secrets=tuple(pull_secrets),
        workers=workers,
        concurrency=tuple(concurrency),
        replicas=_count(spec, "replicas", minimum=0, default=crd.DEFAULT_REPLICAS) or 0,
        lease_seconds=_seconds(spec, "leaseSeconds"),
        poll_seconds=poll,
        max_poll_seconds=max_poll,
        drain_seconds=_count(spec, "drainSeconds", minimum=0, default=crd.DEFAULT_DRAIN_SECONDS) or 0,
        migrate=_get(spec, "migrate", bool, True),
        metrics_port=_count(spec, "metrics.port", minimum=1, default=crd.DEFAULT_METRICS_PORT)
        or crd.DEFAULT_METRICS_PORT,
        pod_monitor=_get(spec, "metrics.podMonitor", bool, False),
        disruption_budget=budget,
        autoscaling=autoscaling,
        service_account_name=_get(spec, "serviceAccountName", str),
        resources=dict(_get(spec, "resources", Mapping, {})),
        env=_objects(spec, "env"),
        env_from=_objects(spec, "envFrom"),
        node_selector=_string_map(spec, "nodeSelector"),
        tolerations=_objects(spec, "tolerations"),
        affinity=dict(_get(spec, "affinity", Mapping, {})),
        pod_labels=pod_labels,
        pod_annotations=_string_map(spec, "podAnnotations"),
        pod_monitor_labels={**(pod_monitor_labels or {}), **_labels(spec, "metrics.podMonitorLabels")},
        pod_security_context=_security_context(spec, "podSecurityContext",
                                                crd.pod_security_context_schema()["properties"]),
        container_security_context=_security_context(spec, "containerSecurityContext",
                                                      crd.container_security_context_schema()["properties"]),
        tmp_size_limit=_quantity(spec, "tmpSizeLimit", crd.DEFAULT_TMP_SIZE_LIMIT),
        automount_service_account_token=_get(spec, "automountServiceAccountToken", bool, False),
        console=_console(spec, name),
    )
    if max_connections is not None and max_connections < parsed.connections_per_pod + \
            parsed.connections_per_pod * ROLLOUT_SURGE:
        raise SpecError(f"spec.database.maxConnections {max_connections} is below what one pod and a rollout's "
                        f"extra pod open ({parsed.connections_per_pod} each: spec.concurrency's handler processes, "
                        "spec.database.poolConnections, one LISTEN): raise it or lower spec.concurrency")
    return parsed
