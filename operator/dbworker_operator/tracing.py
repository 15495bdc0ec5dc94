"""The operator's reconciles as OpenTelemetry spans, when the ``OTEL_*`` environment asks.

The operator's Deployment gets the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_SERVICE_NAME``...); the decision and the SDK set-up are the library's
(``dbworker.tracing``, the second library module the operator imports). Without
OpenTelemetry installed, or not configured, ``reconcile`` is a context that does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from dbworker import tracing as library


@contextlib.contextmanager
def reconcile(namespace: str, name: str, trigger: str) -> Iterator[Any]:
    """A span ``reconcile Worker`` around one reconcile (None when tracing is off): its
    Worker, what triggered it; an exception is recorded and makes the status an error."""
    tracer = library.tracer()
    if tracer is None:
        yield None
        return
    attributes = {"k8s.namespace.name": namespace, "dbworker.worker_resource": name, "dbworker.trigger": trigger}
    with tracer.start_as_current_span("reconcile Worker", attributes=attributes) as span:
        yield span


def flush() -> None:
    """Export what is held (the operator stops)."""
    library.flush()
