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

from dbworker_operator import autoscaling_spec, fields, rules, schemas
from dbworker_operator.autoscaling_spec import Autoscaling as Autoscaling
from dbworker_operator.autoscaling_spec import DatabaseTrigger as DatabaseTrigger
from dbworker_operator.autoscaling_spec import SqlSource as SqlSource
from dbworker_operator.fields import SpecError as SpecError

# Extra pods a rollout runs beside the wanted ones (the Deployment's maxSurge, builders/deployment.py).
ROLLOUT_SURGE = 1



@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class DisruptionBudget:
    min_available: int | str | None
    max_unavailable: int | str | None


@dataclass(frozen=True)
class ConsoleSpec:
    """spec.console, when enabled: `dbworker console` pods behind a Service (builders/console.py)."""

    token_secret: SecretRef
    replicas: int = rules.DEFAULT_CONSOLE_REPLICAS
    read_only: bool = False
    service_type: str = rules.DEFAULT_CONSOLE_SERVICE_TYPE
    service_port: int = rules.DEFAULT_CONSOLE_SERVICE_PORT
    resources: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything the builders need, typed and defaulted. Pass-through pod fields stay dicts."""

    name: str
    namespace: str
    image: str
    app: str
    secret: SecretRef
    env_name: str = rules.DEFAULT_ENV_NAME
    listen_secret: SecretRef | None = None  # spec.database.listenUrlSecretRef
    transaction_pooler: bool = False
    max_connections: int | None = None
    pool_connections: int = rules.DEFAULT_POOL_CONNECTIONS
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    concurrency: tuple[tuple[str, int], ...] = ()
    processes: tuple[tuple[str, int], ...] = ()  # async workers' handler processes
    replicas: int = rules.DEFAULT_REPLICAS
    lease_seconds: float | None = None
    poll_seconds: float | None = None
    max_poll_seconds: float | None = None
    drain_seconds: int = rules.DEFAULT_DRAIN_SECONDS
    migrate: bool = True
    log_level: str | None = None  # None: the command's default
    wakeup_triggers: bool = True
    metrics_port: int = rules.DEFAULT_METRICS_PORT
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
    tmp_size_limit: str = rules.DEFAULT_TMP_SIZE_LIMIT
    automount_service_account_token: bool = False
    console: ConsoleSpec | None = None  # None: no console (spec.console absent or not enabled)

    @property
    def connections_per_pod(self) -> int:
        """The connections one pod opens (README, "Connection budget"): one per handler process
        of a sync worker; an async worker's ``processes`` hold at most their share of its items,
        up to ASYNC_POOL_MAX each; the coordinator engine's pool, and PostgreSQL's one LISTEN
        connection (none on MySQL, as the database trigger's type says, nor behind a
        transaction pooler without a listen URL: those pods poll)."""
        processes = dict(self.processes)
        handlers = sum(async_connections(n, processes[k]) if k in processes else n for k, n in self.concurrency)
        mysql = self.autoscaling is not None and self.autoscaling.database is not None and \
            self.autoscaling.database.type == "mysql"
        polls = mysql or (self.transaction_pooler and self.listen_secret is None)
        return handlers + self.pool_connections + (0 if polls else 1)


def async_connections(concurrency: int, processes: int) -> int:
    """The most connections an async worker's handler processes hold: each its share of the
    items, at most ASYNC_POOL_MAX."""
    share = -(-concurrency // processes)
    return processes * min(share, rules.ASYNC_POOL_MAX)


def _per_worker(spec: Mapping[str, Any], key: str, workers: tuple[str, ...]) -> list[tuple[str, int]]:
    """spec.concurrency or spec.processes: (worker name, count) pairs, sorted and checked."""
    pairs: list[tuple[str, int]] = []
    for name, value in sorted(fields.get(spec, key, Mapping, {}).items()):
        fields.worker_name(name, f"{key}.{name}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"spec.{key}.{name}: {value!r} must be an integer >= 1")
        fields.check_value(fields.schema_of(f"{key}.{name}"), value, f"spec.{key}.{name}")
        if workers and name not in workers:
            raise SpecError(f"spec.{key}.{name}: {name!r} is not in spec.workers; add it there or remove it")
        pairs.append((name, value))
    return pairs


def _name(meta: Mapping[str, Any]) -> str:
    name = str(meta.get("name") or "")
    if len(name) > rules.WORKER_OBJECT_NAME_MAX or not re.match(rules.WORKER_OBJECT_NAME_PATTERN, name):
        raise SpecError(f"metadata.name: {name!r} cannot name the Worker's pods and objects; use a DNS label "
                        f"of at most {rules.WORKER_OBJECT_NAME_MAX} characters (recreate the Worker under it)")
    return name



def _env(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """spec.env, none of it the `dbworker` command's own variables (the CRD's rule, schemas.env_var_rule)."""
    env = fields.objects(spec, "env")
    for i, item in enumerate(env):
        name = item.get("name")
        if not isinstance(name, str) or not name.startswith(rules.DBWORKER_ENV_PREFIX):
            continue
        if name not in rules.DBWORKER_VARIABLES:
            fix = "DBWORKER_* names are the dbworker command's own: remove it"
        elif (field_ := rules.DBWORKER_VARIABLES[name]) is not None:
            fix = f"set {field_} instead (its bounds are checked there) and remove it"
        else:
            fix = "the operator sets it, or keeps the command's default, so the probes, the status and the " \
                  "scaling keep working: remove it"
        raise SpecError(f"spec.env[{i}].name: {name} is a variable of the dbworker command, which the operator "
                        f"sets from the Worker's fields; {fix}")
    return env


def _console(spec: Mapping[str, Any], name: str) -> ConsoleSpec | None:
    if not fields.get(spec, "console.enabled", bool, False):
        return None
    if len(name) > rules.CONSOLE_WORKER_NAME_MAX or not name[:1].isalpha():
        raise SpecError(f"metadata.name: {name!r} cannot name the console's Service {name}{rules.CONSOLE_SUFFIX} "
                        f"(a letter first, at most {rules.CONSOLE_WORKER_NAME_MAX} characters before the suffix): "
                        "recreate the Worker under a shorter name or set spec.console.enabled to false")
    if fields.get(spec, "console.tokenSecretRef", Mapping) is None:
        raise SpecError("spec.console.tokenSecretRef is required with spec.console.enabled: name the Secret and "
                        "key holding the sign-in tokens (SECRET or NAME=SECRET, comma-separated)")
    token = SecretRef(
        fields.required(spec, "console.tokenSecretRef.name", "name the Secret holding the console's sign-in tokens"),
        fields.required(spec, "console.tokenSecretRef.key", "name the key of that Secret holding the tokens"))
    service_type = fields.get(spec, "console.service.type", str, rules.DEFAULT_CONSOLE_SERVICE_TYPE)
    if service_type not in rules.CONSOLE_SERVICE_TYPES:
        raise SpecError(f"spec.console.service.type: {service_type!r}; use one of "
                        f"{', '.join(rules.CONSOLE_SERVICE_TYPES)}")
    port = fields.count(spec, "console.service.port", default=rules.DEFAULT_CONSOLE_SERVICE_PORT)
    if port is None:
        raise SpecError("spec.console.service.port is required; use a port from 1 to 65535")
    return ConsoleSpec(
        token_secret=token,
        replicas=fields.count(spec, "console.replicas", default=rules.DEFAULT_CONSOLE_REPLICAS) or 0,
        read_only=fields.get(spec, "console.readOnly", bool, False),
        service_type=service_type,
        service_port=port,
        resources=dict(fields.get(spec, "console.resources", Mapping, {})),
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
    app = fields.required(spec, "app", "set it to MODULE:ATTR of your Coordinator, e.g. myapp.jobs:coordinator")
    if not re.match(rules.APP_PATTERN, app):
        raise SpecError(f"spec.app: {app!r} is not MODULE:ATTR; e.g. myapp.jobs:coordinator")
    image = fields.required(spec, "image", "set it to the image that holds your application and dbworker")
    secret_name = fields.required(spec, "database.urlSecretRef.name", "name the Secret holding the database URL")
    secret_key = fields.required(spec, "database.urlSecretRef.key", "name the key of that Secret holding the URL")
    env_name = fields.get(spec, "database.envName", str, rules.DEFAULT_ENV_NAME)
    if not re.match(rules.ENV_NAME_PATTERN, env_name):
        raise SpecError(f"spec.database.envName: {env_name!r} is not an environment variable name")
    if env_name.startswith(rules.STARTUP_ENV_PREFIXES) or env_name in rules.STARTUP_ENV_NAMES:
        raise SpecError(f"spec.database.envName: {env_name!r} is read by the loader, Python or dbworker at start; "
                        "keep DATABASE_URL or name the variable your application reads the URL from")

    workers = tuple(fields.worker_name(w, f"workers[{i}]") for i, w in enumerate(fields.get(spec, "workers", list, [])))
    concurrency, processes = _per_worker(spec, "concurrency", workers), _per_worker(spec, "processes", workers)
    for key, n in processes:
        if n > dict(concurrency).get(key, n):
            raise SpecError(f"spec.processes.{key}: {n} is more than spec.concurrency.{key} "
                            f"({dict(concurrency)[key]}); each process carries at least one item")

    poll = fields.seconds(spec, "pollSeconds")
    max_poll = fields.seconds(spec, "maxPollSeconds")
    if (max_poll or rules.LIBRARY_MAX_POLL_SECONDS) < (poll or rules.LIBRARY_POLL_SECONDS):
        raise SpecError("spec.maxPollSeconds must be >= spec.pollSeconds (defaults 10 and 0.25)")

    budget = None
    if fields.get(spec, "disruptionBudget", Mapping) is not None:
        min_available = fields.budget_value(spec, "disruptionBudget.minAvailable")
        max_unavailable = fields.budget_value(spec, "disruptionBudget.maxUnavailable")
        if (min_available is None) == (max_unavailable is None):
            raise SpecError("spec.disruptionBudget needs exactly one of minAvailable or maxUnavailable")
        budget = DisruptionBudget(min_available, max_unavailable)

    autoscaling = autoscaling_spec.parse(spec, workers)
    listen_secret = None
    if fields.get(spec, "database.listenUrlSecretRef", Mapping) is not None:
        listen_secret = SecretRef(
            fields.required(spec, "database.listenUrlSecretRef.name", "name the Secret holding the direct LISTEN URL"),
            fields.required(spec, "database.listenUrlSecretRef.key", "name the key of that Secret holding the URL"))
    transaction_pooler = fields.get(spec, "database.transactionPooler", bool, False)
    if autoscaling and autoscaling.database and autoscaling.database.type == "mysql" and \
            (listen_secret or transaction_pooler):
        raise SpecError("spec.database.listenUrlSecretRef and transactionPooler are for PostgreSQL; "
                        "spec.autoscaling.database.type says mysql: remove them or fix the type")
    max_connections = fields.count(spec, "database.maxConnections", default=None)
    if max_connections is not None:
        unknown = [w for w in workers if w not in dict(concurrency)]
        if not workers or unknown:
            raise SpecError("spec.database.maxConnections needs spec.workers and a spec.concurrency entry for "
                            "each (the operator counts one connection per handler process)"
                            + (f": add spec.concurrency.{unknown[0]}" if unknown else ": list spec.workers"))

    pod_labels = fields.labels(spec, "podLabels")
    for reserved in rules.RESERVED_POD_LABELS:
        if reserved in pod_labels:
            raise SpecError(f"spec.podLabels.{reserved}: reserved for the operator's selector; remove it")

    pull_secrets = []
    for i, ref in enumerate(fields.objects(spec, "imagePullSecrets")):
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
        pool_connections=fields.count(spec, "database.poolConnections", default=rules.DEFAULT_POOL_CONNECTIONS) or 0,
        image_pull_policy=fields.get(spec, "imagePullPolicy", str),
        image_pull_secrets=tuple(pull_secrets),
        workers=workers,
        concurrency=tuple(concurrency),
        processes=tuple(processes),
        replicas=fields.count(spec, "replicas", default=rules.DEFAULT_REPLICAS) or 0,
        lease_seconds=fields.seconds(spec, "leaseSeconds"),
        poll_seconds=poll,
        max_poll_seconds=max_poll,
        drain_seconds=fields.count(spec, "drainSeconds", default=rules.DEFAULT_DRAIN_SECONDS) or 0,
        migrate=fields.get(spec, "migrate", bool, True),
        log_level=fields.get(spec, "logLevel", str),
        wakeup_triggers=fields.get(spec, "wakeupTriggers", bool, True),
        metrics_port=fields.count(spec, "metrics.port", default=rules.DEFAULT_METRICS_PORT)
        or rules.DEFAULT_METRICS_PORT,
        pod_monitor=fields.get(spec, "metrics.podMonitor", bool, False),
        disruption_budget=budget,
        autoscaling=autoscaling,
        service_account_name=fields.get(spec, "serviceAccountName", str),
        resources=dict(fields.get(spec, "resources", Mapping, {})),
        env=_env(spec),
        env_from=fields.objects(spec, "envFrom"),
        node_selector=fields.string_map(spec, "nodeSelector"),
        tolerations=fields.objects(spec, "tolerations"),
        affinity=dict(fields.get(spec, "affinity", Mapping, {})),
        pod_labels=pod_labels,
        pod_annotations=fields.annotation_map(spec, "podAnnotations"),
        pod_monitor_labels={**(pod_monitor_labels or {}), **fields.labels(spec, "metrics.podMonitorLabels")},
        pod_security_context=fields.security_context(spec, "podSecurityContext",
                                                schemas.pod_security_context_schema()["properties"]),
        container_security_context=fields.security_context(spec, "containerSecurityContext",
                                                      schemas.container_security_context_schema()["properties"]),
        tmp_size_limit=fields.quantity(spec, "tmpSizeLimit", rules.DEFAULT_TMP_SIZE_LIMIT),
        automount_service_account_token=fields.get(spec, "automountServiceAccountToken", bool, False),
        console=_console(spec, name),
    )
    fields.check_tree(spec)  # every bound of the CRD's schema, also where no reader above looked
    if max_connections is not None and max_connections < parsed.connections_per_pod + \
            parsed.connections_per_pod * ROLLOUT_SURGE:
        raise SpecError(f"spec.database.maxConnections {max_connections} is below what one pod and a rollout's "
                        f"extra pod open ({parsed.connections_per_pod} each: spec.concurrency's handler processes, "
                        "spec.database.poolConnections, one LISTEN): raise it or lower spec.concurrency")
    return parsed
