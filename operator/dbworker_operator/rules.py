"""What a valid Worker is, as data: patterns, defaults, bounds and reserved names.

The CRD's schema (schemas.py, crd.py) and the operator's own checks (spec.py) read them from
here, so the API server and the operator refuse the same Workers with the same limits.
"""

from __future__ import annotations

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
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")  # the `dbworker` command's --log-level
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

# ---- upper bounds: every number a Worker holds, each one the library, the databases and the OS can
# hold (a lease of 1e308 seconds overflows the lease keeper's timer and kills it). The operator's
# README lists them; the CRD's schema and the operator's checks both read them from here.
MAX_SECONDS = 86400  # leaseSeconds, pollSeconds, maxPollSeconds, drainSeconds: one day
MAX_PODS = 1000  # replicas, autoscaling.minReplicas and maxReplicas, a disruption budget's count
MAX_TARGET_PER_SLOT = 1000  # autoscaling.targetPerSlot: items per handler slot
MAX_LABELS = 32  # podLabels, metrics.podMonitorLabels
# podAnnotations: together at most 128 KiB of values, half the API server's 256 KiB for all of an
# object's annotations (the operator and other controllers add their own).
MAX_POD_ANNOTATIONS = 64
MAX_ANNOTATION_VALUE = 2048
MAX_ANNOTATION_KEY = 316  # a qualified name: a DNS subdomain prefix (253), '/', a name (63)
MAX_SQL_FILTER = 2048  # autoscaling.database.sources[].filter
# spec.env entries: each passes a CEL rule, and a bounded list keeps the rule's estimated cost far
# under the API server's limit however large the request.
MAX_ENV = 256

# ---- environment variables
# The `dbworker` command's own variables (dbworker/pod/options.py, its termination log), each with
# the Worker field the operator sets it from, or None where the operator fixes its value. spec.env
# may set none of them (nor any other DBWORKER_* name): they would bypass these fields' checks,
# break the probes or hide the exit reasons.
DBWORKER_ENV_PREFIX = "DBWORKER_"
# The most connections one async handler process holds (the library's sql/drivers.ASYNC_POOL_MAX,
# copied: the operator imports only dbworker.redact; a test keeps the two equal).
ASYNC_POOL_MAX = 4
DBWORKER_VARIABLES: dict[str, str | None] = {
    "DBWORKER_APP": "spec.app",
    "DBWORKER_WORKER": "spec.workers",
    "DBWORKER_CONCURRENCY": "spec.concurrency",
    "DBWORKER_PROCESSES": "spec.processes",
    "DBWORKER_METRICS_PORT": "spec.metrics.port",
    "DBWORKER_METRICS_HOST": None,
    "DBWORKER_DRAIN_SECONDS": "spec.drainSeconds",
    "DBWORKER_CREATE_TABLES": "spec.migrate",
    "DBWORKER_LEASE_SECONDS": "spec.leaseSeconds",
    "DBWORKER_POLL_SECONDS": "spec.pollSeconds",
    "DBWORKER_MAX_POLL_SECONDS": "spec.maxPollSeconds",
    "DBWORKER_BACKLOG_SECONDS": None,
    "DBWORKER_NO_WAKEUP_TRIGGERS": "spec.wakeupTriggers",
    "DBWORKER_NOTIFY_TRIGGERS": None,
    "DBWORKER_FAILED": None,
    "DBWORKER_JSON": None,
    "DBWORKER_ALL_FAILED": None,
    "DBWORKER_ITEM": None,
    "DBWORKER_PORT": "spec.console.service.port",
    "DBWORKER_HOST": None,
    "DBWORKER_CONSOLE_TOKEN": "spec.console.tokenSecretRef",
    "DBWORKER_READ_ONLY": "spec.console.readOnly",
    "DBWORKER_TRACE_URL": None,
    "DBWORKER_TRANSACTION_POOLER": "spec.database.transactionPooler",
    "DBWORKER_LISTEN_URL": "spec.database.listenUrlSecretRef",
    "DBWORKER_LOG_FORMAT": None,
    "DBWORKER_LOG_LEVEL": "spec.logLevel",
    "DBWORKER_TERMINATION_LOG": None,
}
# What the dynamic loader, Python or dbworker read at start: spec.database.envName may not name
# one of them (the database URL would become a library path, a module path or a setting).
STARTUP_ENV_PREFIXES = ("LD_", "PYTHON", DBWORKER_ENV_PREFIX)
STARTUP_ENV_NAMES = ("PATH", "HOME", "TMPDIR", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH",
                     "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "SSL_CERT_FILE", "SSL_CERT_DIR")
