"""OpenTelemetry on Kubernetes (issue 31): a Worker's OTEL_* settings reach its pods, and the
operator's reconciles are spans when its own environment configures tracing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dbworker_operator import spec
from dbworker_operator.builders import deployment

from tests.k8s import samples

ROOT = Path(__file__).resolve().parents[2]
OTEL = [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
        {"name": "OTEL_SERVICE_NAME", "value": "imgdedup-worker"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "deployment.environment=prod"}]  # fmt: skip


def test_a_workers_otel_settings_reach_its_pods_and_their_migration() -> None:
    body = samples.with_spec(samples.minimal(), env=OTEL)
    dep = deployment.build(spec.parse(body), replicas=1)
    pod = dep["spec"]["template"]["spec"]
    seen = set()
    for container in [*pod["containers"], *pod.get("initContainers", [])]:
        if container["name"] not in ("worker", "migrate"):
            continue
        env: dict[str, Any] = {e["name"]: e.get("value") for e in container["env"]}
        assert {e["name"]: e["value"] for e in OTEL}.items() <= env.items(), container["name"]
        seen.add(container["name"])
    assert seen == {"worker", "migrate"}


RECONCILE = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from dbworker_operator import tracing

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with tracing.reconcile("shop", "mail", trigger="create"):
    pass
try:
    with tracing.reconcile("shop", "thumbs", trigger="resync"):
        raise RuntimeError("the API server said no")
except RuntimeError:
    pass
ok, failed = exporter.get_finished_spans()
assert ok.name == failed.name == "reconcile Worker"
assert dict(ok.attributes) == {"k8s.namespace.name": "shop", "dbworker.worker_resource": "mail",
                               "dbworker.trigger": "create"}, ok.attributes
assert ok.status.status_code == trace.StatusCode.UNSET
assert failed.status.status_code == trace.StatusCode.ERROR
assert [e.name for e in failed.events] == ["exception"]
print("ok")
"""

UNTRACED = """
from opentelemetry import trace
from dbworker_operator import tracing
with tracing.reconcile("shop", "mail", trigger="create") as span:
    assert span is None
assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
print("ok")
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "operator"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_operator_traces_its_reconciles_when_configured() -> None:
    done = _python(RECONCILE)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_operator_traces_nothing_when_not_configured() -> None:
    done = _python(UNTRACED)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
