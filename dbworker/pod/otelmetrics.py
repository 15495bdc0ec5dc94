"""The pod's Prometheus series as OpenTelemetry metrics, with the same names (no second vocabulary).

One definition, two ways out: ``metrics.WorkerMetrics`` keeps the series on its registry;
when the ``OTEL_*`` environment asks for metrics (``OTEL_METRICS_EXPORTER`` other than
``none``, or an OTLP endpoint set), ``start`` registers one asynchronous OpenTelemetry
instrument per series family that reads the registry at each export: counters as
observable counters named as the family (``dbworker_claims``, which Prometheus shows as
``dbworker_claims_total``), gauges as observable gauges, histograms as their ``_count`` and
``_sum`` (OpenTelemetry has no asynchronous histogram). Labels become attributes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("dbworker")


def wanted(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for metrics to be exported."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))


def readings(families: Iterable[Any]) -> dict[tuple[str, str], list[tuple[float, dict[str, str]]]]:
    """(instrument name, kind) -> [(value, attributes)] from a registry's ``collect()``.

    kind is ``counter`` or ``gauge``; histograms give ``<name>_count`` and ``<name>_sum``;
    anything else (gauges, info) is a gauge named as its samples.
    """
    out: dict[tuple[str, str], list[tuple[float, dict[str, str]]]] = {}
    for family in families:
        for sample in family.samples:
            if family.type == "counter":
                if not sample.name.endswith("_total"):
                    continue
                key = (family.name, "counter")
            elif family.type in ("histogram", "summary"):
                if not sample.name.endswith(("_count", "_sum")):
                    continue
                key = (sample.name, "counter")
            else:  # gauges, and info (``dbworker_build_info``, 1 with its labels)
                key = (sample.name, "gauge")
            out.setdefault(key, []).append((float(sample.value), dict(sample.labels)))
    return out


def bridge(registry: Any, meter_provider: Any) -> None:
    """Register the registry's families as asynchronous instruments of ``meter_provider``."""
    from opentelemetry.metrics import CallbackOptions, Observation

    meter = meter_provider.get_meter("dbworker")
    described = {f.name: f.documentation for f in registry.collect()}

    def callback(name: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_: CallbackOptions) -> list[Observation]:
            found = readings(registry.collect())
            values = found.get((name, "counter")) or found.get((name, "gauge")) or []
            return [Observation(value, attributes) for value, attributes in values]

        return observe

    for name, kind in readings(registry.collect()).keys() | _declared(registry):
        base = name.removesuffix("_count").removesuffix("_sum")
        doc = described.get(name) or described.get(base) or ""
        if kind == "counter":
            meter.create_observable_counter(name, callbacks=[callback(name)], description=doc)
        else:
            meter.create_observable_gauge(name, callbacks=[callback(name)], description=doc)


def _declared(registry: Any) -> set[tuple[str, str]]:
    """Families with no sample yet (no label set touched) still get their instrument."""
    out: set[tuple[str, str]] = set()
    for family in registry.collect():
        if family.type == "counter":
            out.add((family.name, "counter"))
        elif family.type == "gauge":
            out.add((family.name, "gauge"))
        elif family.type == "histogram":
            out |= {(f"{family.name}_count", "counter"), (f"{family.name}_sum", "counter")}
    return out


def start(registry: Any, env: Mapping[str, str] | None = None) -> Callable[[], None] | None:
    """Export the registry as OpenTelemetry metrics when the environment asks (OTLP over
    HTTP, every ``OTEL_METRIC_EXPORT_INTERVAL`` ms); returns the shutdown (flushes), or None."""
    if not wanted(os.environ if env is None else env):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning("OTEL_* asks for metrics but dbworker[otel] is not installed; Prometheus only")
        return None
    provider = MeterProvider(resource=Resource.create(),
                             metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])  # fmt: skip
    bridge(registry, provider)
    log.info("exporting the metrics over OTLP too (OTEL_* environment)")
    return provider.shutdown
