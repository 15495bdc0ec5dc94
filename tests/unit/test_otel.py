"""OpenTelemetry off and on without a database: the environment's verdicts, the extra absent,
installed but not configured, the metrics bridge's names (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import dbworker.otel
from dbworker import tracing
from dbworker.pod import metrics, otelmetrics

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SERVICE_NAME": "pod"}, False),
    ],
)
def test_the_environment_decides_whether_spans_are_exported(env: dict[str, str], wanted: bool) -> None:
    assert tracing.wants_export(env) is wanted
    metrics_env = {k.replace("TRACES", "METRICS"): v for k, v in env.items()}
    assert otelmetrics.wanted(metrics_env) is wanted


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT), clean.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                           timeout=120, cwd=ROOT)  # fmt: skip


ABSENT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import io, json, logging
import sqlalchemy as sa
import dbworker, dbworker.otel
from dbworker import logs, tracing
assert not tracing.available() and tracing.tracer() is None and tracing.current_ids() is None
try:
    dbworker.otel.instrument(sa.create_engine("sqlite://"))
except RuntimeError as exc:
    assert "pip install 'dbworker[otel]'" in str(exc), exc
else:
    raise AssertionError("instrument() without OpenTelemetry must say what to install")
stream = io.StringIO()
logs.setup(fmt="json", stream=stream)
logging.getLogger("dbworker").warning("hello")
line = json.loads(stream.getvalue())
assert "trace_id" not in line and line["message"] == "hello"
assert not any(m.startswith("opentelemetry") for m in sys.modules)
print("ok")
"""


def test_without_the_extra_nothing_of_opentelemetry_is_imported() -> None:
    done = _python(ABSENT, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


NOT_CONFIGURED = """
from opentelemetry import trace
from dbworker import tracing
assert tracing.available() and tracing.tracer() is None
assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # dbworker set none
print("ok")
"""


def test_installed_but_not_configured_is_off() -> None:
    done = _python(NOT_CONFIGURED, {})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


APP_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from dbworker import tracing
trace.set_tracer_provider(TracerProvider())
assert tracing.tracer() is not None  # the application's provider, no OTEL_* needed
with tracing.tracer().start_as_current_span("x") as span:
    header = tracing.current_traceparent()
    ids = tracing.current_ids()
ctx = span.get_span_context()
assert header == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}", header
assert ids == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
assert tracing.span_context(header) == trace.SpanContext(ctx.trace_id, ctx.span_id, True, ctx.trace_flags)
assert tracing.parent_context("not a traceparent") is None and tracing.parent_context(None) is None
print("ok")
"""


def test_an_application_set_provider_turns_tracing_on() -> None:
    done = _python(APP_PROVIDER, {})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_instrument_names_what_it_takes() -> None:
    with pytest.raises(TypeError, match="Engine or sessionmaker"):
        dbworker.otel.instrument("sqlite://")  # type: ignore[arg-type]
    engine = sa.create_engine("sqlite://")
    dbworker.otel.instrument(engine)
    dbworker.otel.instrument(engine)  # idempotent


def test_the_otel_metrics_have_the_prometheus_names() -> None:
    registry = metrics.new_registry()
    worker_metrics = metrics.WorkerMetrics(registry, version="test")
    worker_metrics.touch(["mail"], slots={"mail": 2})
    worker_metrics.claimed("mail", count=3, taken_over=1, seconds=0.01)
    worker_metrics.executed("mail", outcome="finished", seconds=0.2)
    worker_metrics.executed("mail", outcome="failed", seconds=0.1)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otelmetrics.bridge(registry, provider)
    data = reader.get_metrics_data()
    assert data is not None
    exported = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    for family in registry.collect():
        if family.type == "histogram":
            assert {f"{family.name}_count", f"{family.name}_sum"} <= exported.keys()
        elif family.type == "counter":
            assert family.name in exported, family.name  # Prometheus: dbworker_claims_total
        else:
            assert {s.name for s in family.samples} <= exported.keys(), family.name
    claims = {tuple(p.attributes.items()): p.value for p in exported["dbworker_claims"].data.data_points}
    assert claims[(("worker", "mail"),)] == 3
    runs = {p.attributes["outcome"]: p.value for p in exported["dbworker_handler_duration_seconds_count"].data.data_points
            if p.attributes["worker"] == "mail"}  # fmt: skip
    assert runs["finished"] == 1 and runs["failed"] == 1
    provider.shutdown()
