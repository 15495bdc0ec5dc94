"""The KEDA ScaledObject (and its TriggerAuthentication) that scale a Worker's Deployment on its work.

Pure. Two triggers, and the HPA follows the larger:

- ``prometheus``: the work in flight plus the work waiting, in pods' worth of handler slots.
  Every pod reports the same database-wide ``dbworker_backlog{worker}``, so the waiting work
  is the max over pods summed over workers; ``dbworker_handlers_active`` and
  ``dbworker_handler_slots`` are per pod. A fleet busy on every slot with an empty backlog
  asks for the pods it has, so it is not scaled in under running handlers.
- ``postgresql`` / ``mysql`` (``spec.autoscaling.database``): the database's own claimable
  count, so the fleet wakes from zero pods, when there are no metrics (``claimable_query``).

Pods are picked by their selector labels, which the PodMonitor (monitoring.py) carries into
the series as ``app_kubernetes_io_name`` and ``app_kubernetes_io_instance`` (the names the
Prometheus Operator and Prometheus's own ``labelmap`` of pod labels both give them), never by
pod name: Kubernetes truncates long generated pod names, and a name prefix matches other Workers.

Every field and trigger metadata key is one KEDA documents (2.16; a key KEDA does not know is
silently ignored): ScaledObject https://keda.sh/docs/2.16/reference/scaledobject-spec/,
prometheus https://keda.sh/docs/2.16/scalers/prometheus/, postgresql
https://keda.sh/docs/2.16/scalers/postgresql/, mysql https://keda.sh/docs/2.16/scalers/mysql/,
TriggerAuthentication https://keda.sh/docs/2.16/concepts/authentication/.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from dbworker_operator import budget, kinds, labels
from dbworker_operator.autoscaling_spec import DatabaseTrigger, SqlSource
from dbworker_operator.spec import WorkerSpec

POLLING_SECONDS = 15
# Scale-in pacing when the spec sets no autoscaling.behavior: after five minutes of less work,
# one pod a minute. A stopping pod drains its handlers, so fast scale-in is churn.
DEFAULT_BEHAVIOR: dict[str, Any] = {
    "scaleDown": {"stabilizationWindowSeconds": 300,
                  "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
}
# Each part of the database trigger's count stops at this many rows: the number only has to
# say how many pods, and the query's cost stays bounded whatever waits.
COUNT_CAP = 10_000
# The work table's status values (dbworker.contract.ExecutionStatus; copied, not imported:
# the operator imports only dbworker.redact of the library).
UNFINISHED = "unfinished"
WORKING = "working"
# KEDA's name for the connection string among each scaler's authentication parameters.
AUTH_PARAMETER = {"postgresql": "connection", "mysql": "connectionString"}
# ... and its trigger metadata keys for the target and the activation value.
TARGET_KEYS = {"postgresql": ("targetQueryValue", "activationTargetQueryValue"),
               "mysql": ("queryValue", "activationQueryValue")}


def series_label(label: str) -> str:
    """The Prometheus label name a pod label becomes (invalid characters turn into ``_``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _matchers(spec: WorkerSpec) -> str:
    return ",".join([f'namespace="{spec.namespace}"',
                     *(f'{series_label(k)}="{v}"' for k, v in sorted(labels.selector(spec.name).items()))])


def backlog_query(spec: WorkerSpec) -> str:
    """PromQL for the Worker's waiting work: its pods' series, matched exactly by their selector labels."""
    return f"sum(max by (worker) (dbworker_backlog{{{_matchers(spec)}}}))"


def work_query(spec: WorkerSpec) -> str:
    """PromQL for the work in flight plus waiting, divided by the handler slots of one pod: the
    pods this work fills at one item per slot (0 with no pods: the database trigger wakes them)."""
    m = _matchers(spec)
    in_flight = f"sum(dbworker_handlers_active{{{m}}})"
    slots_per_pod = f"(sum(dbworker_handler_slots{{{m}}}) / count(count by (instance) (dbworker_handler_slots{{{m}}})))"
    return f"(({in_flight} + {backlog_query(spec)}) / {slots_per_pod}) or vector(0)"


def _number(value: float) -> str:
    return f"{value:g}"


def slots_per_pod(spec: WorkerSpec) -> int:
    """Handler slots of one pod as far as the spec says (a worker without spec.concurrency counts one)."""
    given = dict(spec.concurrency)
    names = spec.workers or tuple(given)
    return max(1, sum(given.get(name, 1) for name in names))


def _quote(kind: str, name: str) -> str:
    # Names are plain (rules.SQL_NAME_PATTERN): quoting keeps their case and any reserved word.
    return f"`{name}`" if kind == "mysql" else f'"{name}"'


def _source_counts(kind: str, source: SqlSource) -> list[str]:
    """The claimable parts of one worker, each a bounded COUNT over an index:

    - source rows above the highest key the worker ever recorded (the primary-key index of
      both tables: MAX is one index probe, the range starts past the history), or every
      source row while the work table is empty;
    - recorded items waiting for another attempt and due (the status index);
    - items whose lease expired (the status index; WORKING rows are few).

    Source rows below the highest recorded key that have no record are not counted: keys
    that grow (identity / auto-increment) keep that set empty, and pods count it exactly.
    """
    q = functools.partial(_quote, kind)
    work = q(f"{source.worker}_work")
    table, key = q(source.table), q(source.key)
    now = "UTC_TIMESTAMP(6)" if kind == "mysql" else "timezone('UTC', statement_timestamp())"
    condition = f" AND ({source.filter})" if source.filter else ""
    tag = source.worker
    return [
        f"SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM {table} WHERE {key} > "
        f"(SELECT MAX(source_id) FROM {work}){condition} LIMIT {COUNT_CAP}) AS {q(f'{tag}_fresh')}",
        f"SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM {table} WHERE NOT EXISTS "
        f"(SELECT 1 FROM {work}){condition} LIMIT {COUNT_CAP}) AS {q(f'{tag}_first')}",
        f"SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM {work} WHERE execution_status = '{UNFINISHED}' AND "
        f"(not_before IS NULL OR not_before <= {now}) LIMIT {COUNT_CAP}) AS {q(f'{tag}_again')}",
        f"SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM {work} WHERE execution_status = '{WORKING}' AND "
        f"lease_expires_at <= {now} LIMIT {COUNT_CAP}) AS {q(f'{tag}_expired')}",
    ]


def claimable_query(trigger: DatabaseTrigger) -> str:
    """The database trigger's SQL: the claimable items of every listed worker, one integer."""
    parts = [part for source in trigger.sources for part in _source_counts(trigger.type, source)]
    union = " UNION ALL ".join(parts)
    return f"SELECT CAST(COALESCE(SUM(n), 0) AS {'SIGNED' if trigger.type == 'mysql' else 'BIGINT'}) " \
           f"FROM ({union}) AS {_quote(trigger.type, 'dbworker_claimable')}"


def trigger_authentication_name(spec: WorkerSpec) -> str:
    # The Worker's name, as every object it owns (handlers find leftovers to delete by it).
    return spec.name


def build_trigger_authentication(spec: WorkerSpec) -> dict[str, Any] | None:
    """KEDA's credentials for the database trigger: the connection string under the Worker
    Secret's ``autoscaling.database.connectionKey`` (the operator never reads it)."""
    if spec.autoscaling is None or spec.autoscaling.database is None:
        return None
    trigger = spec.autoscaling.database
    return {
        "apiVersion": kinds.TRIGGER_AUTHENTICATION.api_version,
        "kind": kinds.TRIGGER_AUTHENTICATION.kind,
        "metadata": {"name": trigger_authentication_name(spec), "namespace": spec.namespace,
                     "labels": labels.common(spec.name)},
        # TriggerAuthentication spec.secretTargetRef: parameter, name, key.
        "spec": {"secretTargetRef": [{"parameter": AUTH_PARAMETER[trigger.type],
                                      "name": spec.secret.name, "key": trigger.connection_key}]},
    }


def _database_trigger(spec: WorkerSpec, trigger: DatabaseTrigger, target: float) -> dict[str, Any]:
    target_key, activation_key = TARGET_KEYS[trigger.type]
    return {
        "type": trigger.type,
        "name": "database",
        "metricType": "AverageValue",
        "metadata": {
            "query": claimable_query(trigger),
            # Items per pod: its slots at the target per slot; any claimable item activates.
            target_key: _number(slots_per_pod(spec) * target),
            activation_key: "0",
        },
        "authenticationRef": {"name": trigger_authentication_name(spec)},
    }


def build(spec: WorkerSpec) -> dict[str, Any] | None:
    """The ScaledObject for ``spec``, or None when the spec asks for no autoscaling."""
    if spec.autoscaling is None:
        return None
    scaling = spec.autoscaling
    cap = budget.replica_cap(spec)
    max_replicas = scaling.max_replicas if cap is None else cap
    triggers: list[dict[str, Any]] = [{
        "type": "prometheus",
        "name": "work",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": scaling.prometheus_address,
            "query": work_query(spec),
            "threshold": _number(scaling.target_per_slot),
            # Any work activates (scales from zero when Prometheus still has the series).
            "activationThreshold": "0",
        },
    }]
    if scaling.database is not None:
        triggers.append(_database_trigger(spec, scaling.database, scaling.target_per_slot))
    return {
        "apiVersion": kinds.SCALED_OBJECT.api_version,
        "kind": kinds.SCALED_OBJECT.kind,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels.common(spec.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": kinds.DEPLOYMENT.api_version, "kind": kinds.DEPLOYMENT.kind,
                               "name": spec.name},
            # Within the connection budget (budget.py): never more pods than fit.
            "minReplicaCount": min(scaling.min_replicas, max_replicas),
            "maxReplicaCount": max_replicas,
            "pollingInterval": POLLING_SECONDS,
            # No cooldownPeriod: KEDA uses it only to go from 1 pod to 0 (its default, 300 s, then
            # applies); every other scale-in is paced by the HPA behavior below.
            "advanced": {"horizontalPodAutoscalerConfig": {
                "behavior": copy.deepcopy(dict(scaling.behavior) if scaling.behavior is not None else DEFAULT_BEHAVIOR)}},
            "triggers": triggers,
        },
    }
