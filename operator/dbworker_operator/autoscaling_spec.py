"""spec.autoscaling read into ``Autoscaling``: KEDA's bounds, target, pacing and the database trigger.

The trigger's sources name a table, key and filter that builders/autoscaling.py writes into
KEDA's SQL query, so each is checked here before it can reach SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dbworker_operator import fields, rules, sql_filter
from dbworker_operator.fields import SpecError


@dataclass(frozen=True)
class SqlSource:
    """A worker's source table, for the database trigger's claimable count."""

    worker: str
    table: str
    key: str = rules.DEFAULT_SOURCE_KEY
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
    target_per_slot: float = rules.DEFAULT_TARGET_PER_SLOT
    behavior: Mapping[str, Any] | None = None  # None: the builder's default pacing
    database: DatabaseTrigger | None = None



def _sources(spec: Mapping[str, Any], path: str, workers: tuple[str, ...], kind: str) -> tuple[SqlSource, ...]:
    found: list[SqlSource] = []
    for i, item in enumerate(fields.objects(spec, path)):
        where = f"{path}[{i}]"
        worker = fields.worker_name(item.get("worker"), f"{where}.worker")
        if workers and worker not in workers:
            raise SpecError(f"spec.{where}.worker: {worker!r} is not in spec.workers; add it there or remove it")
        if any(source.worker == worker for source in found):
            raise SpecError(f"spec.{where}.worker: {worker!r} is listed twice; keep one entry")
        names = {}
        for name, default in (("table", None), ("key", rules.DEFAULT_SOURCE_KEY)):
            value = item.get(name, default)
            if not isinstance(value, str) or not re.match(rules.SQL_NAME_PATTERN, value):
                raise SpecError(f"spec.{where}.{name}: {value!r} is not a plain SQL name; use letters, digits "
                                "and _ (the table and column as created, unquoted)")
            names[name] = value
        condition = item.get("filter")
        if condition is not None:
            why = sql_filter.problem(condition, kind=kind, table=names["table"]) if isinstance(condition, str) \
                else f"it is {type(condition).__name__}, not a string"
            if why is not None:
                raise SpecError(f"spec.{where}.filter: {why}: write one condition on the source table's columns "
                                f"such as {sql_filter.EXAMPLE!r} (comparisons, AND/OR/NOT, IS NULL, IN, BETWEEN, "
                                "LIKE, literals, CAST, COALESCE, LOWER, UPPER, LENGTH, ABS and the clock); no "
                                "subqueries, other tables or functions, comments, ; or backslashes")
        found.append(SqlSource(worker, names["table"], names["key"], condition))
    return tuple(found)


def parse(spec: Mapping[str, Any], workers: tuple[str, ...]) -> Autoscaling | None:
    """spec.autoscaling as ``Autoscaling`` (None when absent); ``workers`` is spec.workers."""
    if fields.get(spec, "autoscaling", Mapping) is None:
        return None
    max_replicas = fields.count(spec, "autoscaling.maxReplicas", default=None)
    if max_replicas is None:
        raise SpecError("spec.autoscaling.maxReplicas is required when autoscaling is set")
    min_replicas = fields.count(spec, "autoscaling.minReplicas", default=1) or 0
    if min_replicas > max_replicas:
        raise SpecError("spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas")
    target = fields.get(spec, "autoscaling.targetPerSlot", (int, float), rules.DEFAULT_TARGET_PER_SLOT)
    database = None
    if fields.get(spec, "autoscaling.database", Mapping) is not None:
        kind = fields.get(spec, "autoscaling.database.type", str)
        if kind not in rules.SQL_TRIGGER_TYPES:
            raise SpecError(f"spec.autoscaling.database.type: {kind!r}; use postgresql or mysql (the database "
                            "behind spec.database.urlSecretRef)")
        key = fields.required(spec, "autoscaling.database.connectionKey",
                        "name the key of the spec.database.urlSecretRef Secret holding KEDA's connection string")
        if not re.match(rules.SECRET_KEY_PATTERN, key):
            raise SpecError(f"spec.autoscaling.database.connectionKey: {key!r} is not a Secret key")
        sources = _sources(spec, "autoscaling.database.sources", workers, kind)
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
        prometheus_address=fields.get(spec, "autoscaling.prometheusAddress", str, rules.DEFAULT_PROMETHEUS_ADDRESS),
        target_per_slot=float(target),
        behavior=fields.get(spec, "autoscaling.behavior", Mapping),
        database=database,
    )

