"""OpenTelemetry, when it is installed and configured; nothing at all otherwise.

dbworker never requires OpenTelemetry: every import of it is guarded here, and callers ask
``tracer()`` once (at a coordinator's start, in a handler process) and skip all tracing work
when it answers None. Tracing is on when the application set an SDK tracer provider, or when
the standard ``OTEL_*`` environment asks for an exporter (then dbworker builds the SDK's
provider from that environment, as the pod command and handler processes must).

The span and attribute names of dbworker's items live here too (OpenTelemetry's messaging
conventions, consumer side, where they fit), so the coordinator and the handler processes
name things one way.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from dbworker.messages import RETRIED as RETRIED_OUTCOME
from dbworker.messages import Report

log = logging.getLogger("dbworker")

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is absent: tracing is off, at no cost
    otel_trace = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

SYSTEM = "dbworker"  # messaging.system
SCOPE = "dbworker"
# Attributes (messaging semantic conventions, then dbworker's own).
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
WORKER = "dbworker.worker"
SOURCE_TABLE = "dbworker.source_table"
KEY = "dbworker.key"
ATTEMPT = "dbworker.attempt"
OUTCOME = "dbworker.outcome"
POD = "dbworker.pod"
# Events on an item's span.
LEASE_LOST = "dbworker.lease_lost"
GIVEN_BACK = "dbworker.given_back"
TIMED_OUT = "dbworker.timed_out"
RECALLED = "dbworker.recalled"
CANCELLED = "dbworker.cancelled"
RETRIED = "dbworker.retried"
# Outcomes whose span status is an error.
ERROR_OUTCOMES = frozenset({"failed", "crashed", "timed_out", "retried", "retry", "lost"})

_tracer: Any = None
_decided = False
_own_provider: Any = None  # the SDK provider dbworker built from the environment, if any


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return otel_trace is not None


def wants_export(env: Mapping[str, str]) -> bool:
    """Whether the standard ``OTEL_*`` variables in ``env`` ask for spans to be exported."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _provider_set() -> bool:
    """Whether the application (or anyone) set a tracer provider that records."""
    assert otel_trace is not None
    provider = otel_trace.get_tracer_provider()
    return not isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider)


def tracer(*, env: Mapping[str, str] | None = None) -> Any:
    """dbworker's tracer when tracing is on in this process, else None (decided once)."""
    global _tracer, _decided
    if _decided:
        return _tracer
    _decided = True
    if otel_trace is None:
        return None
    wanted = _provider_set() or wants_export(os.environ if env is None else env)
    if not wanted or (not _provider_set() and not configure_from_env()):
        return None
    _tracer = otel_trace.get_tracer(SCOPE)
    return _tracer


def reset() -> None:
    """Decide again at the next ``tracer()`` (a provider set after a first answer)."""
    global _tracer, _decided
    _tracer, _decided = None, False


def configure_from_env() -> bool:
    """Set an SDK tracer provider built from the ``OTEL_*`` environment as the global one:
    its resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) and a batch processor
    per exporter of ``OTEL_TRACES_EXPORTER`` (default ``otlp``: OTLP over HTTP/protobuf, whose
    endpoint and headers the exporter reads from the environment; ``console`` too). False
    (and logged) when the SDK or the exporter is not installed."""
    global _own_provider
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning("dbworker: OTEL_* asks for traces but opentelemetry-sdk is not installed "
                    "(install dbworker[otel]); no spans")  # fmt: skip
        return False
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            if protocol != "http/protobuf":
                log.warning("dbworker: OTLP protocol %r is not supported (dbworker[otel] ships "
                            "http/protobuf); exporting with http/protobuf", protocol)  # fmt: skip
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning("dbworker: opentelemetry-exporter-otlp-proto-http is not installed "
                            "(install dbworker[otel]); no OTLP spans")  # fmt: skip
                continue
            exporters.append(OTLPSpanExporter())
        elif name != "none":
            log.warning("dbworker: unknown OTEL_TRACES_EXPORTER %r ignored (use otlp, console or none)", name)
    if not exporters:
        return False
    created = Resource.create()
    provider = TracerProvider(resource=_hashed_once(Resource)(created.attributes, created.schema_url))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    assert otel_trace is not None
    otel_trace.set_tracer_provider(provider)
    _own_provider = provider
    return True


@functools.cache
def _hashed_once(resource: type) -> type:
    """A ``Resource`` whose hash is computed once. The OTLP encoder hashes each span's resource
    to group the spans of a batch, and the SDK's hash is a sorted JSON dump of its attributes:
    about a seventh of the encoding of an item's span. A resource never changes."""

    class HashedOnce(resource):  # type: ignore[misc]
        _hash: int | None = None

        def __hash__(self) -> int:
            if self._hash is None:
                self._hash = super().__hash__()
            return self._hash

    return HashedOnce


def flush(timeout_millis: int = 5000) -> None:
    """Export what the global provider holds (before a handler process or the pod ends)."""
    if otel_trace is None or not _decided or _tracer is None:
        return
    provider = otel_trace.get_tracer_provider()
    force = getattr(provider, "force_flush", None)
    if force is not None:
        try:
            force(timeout_millis)
        except Exception:  # noqa: BLE001 - an exporter's failure never stops a process ending
            pass


def traceparent(span: Any) -> str | None:
    """The W3C ``traceparent`` of ``span`` (None when it is not a valid span)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, if one is recording or sampled away."""
    if otel_trace is None:
        return None
    return traceparent(otel_trace.get_current_span())


def parent_context(header: str | None) -> Any:
    """An OpenTelemetry context whose parent is the span of ``header`` (None: no parent)."""
    found = span_context(header)
    if found is None:
        return None
    return otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(found), otel_context.Context())


def span_context(header: str | None) -> Any:
    """The remote ``SpanContext`` ``header`` names (a parent, a link), or None when it names
    none. Version 00, the only one dbworker writes, is parsed here (twice per item: the
    propagator's regular expressions and context objects cost more); others by the propagator."""
    if header is None or otel_trace is None:
        return None
    parts = header.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return _extracted(header)
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not (trace_id and span_id) or not (parts[1] + parts[2] + parts[3]).isalnum():
        return None  # all zeros, or int()'s leniency ("+", "_")
    return otel_trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=otel_trace.TraceFlags(flags))


def _extracted(header: str) -> Any:
    """``span_context`` through the W3C propagator (another version than 00, or malformed)."""
    if TraceContextTextMapPropagator is None or otel_context is None:
        return None
    ctx = TraceContextTextMapPropagator().extract({"traceparent": header}, context=otel_context.Context())
    found = otel_trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None


@functools.lru_cache(maxsize=256)
def _constant_attributes(worker: str, source_table: str, operation: str, pod: str) -> dict[str, Any]:
    """The attributes of an item's span that do not depend on the item (built once)."""
    return {
        "messaging.system": SYSTEM,
        OPERATION_TYPE: operation,
        OPERATION_NAME: "claim" if operation == "receive" else "process",
        DESTINATION: worker,
        WORKER: worker,
        SOURCE_TABLE: source_table,
        POD: pod,
    }


def item_attributes(worker: str, source_table: str, key: Any, *, operation: str, pod: str) -> dict[str, Any]:
    """The attributes every span of one item has (messaging conventions, consumer side)."""
    attrs = dict(_constant_attributes(worker, source_table, operation, pod))
    attrs[MESSAGE_ID] = attrs[KEY] = str(key)
    return attrs


@contextlib.contextmanager
def process_span(tracer: Any, worker: str, source_table: str, key: Any, *, pod: str,
                 parent: str | None) -> Iterator[Any]:  # fmt: skip
    """The handler process's span of one item (``process <worker>``), the child of the claim
    span whose ``traceparent`` is ``parent``, current inside the ``with`` and ended after it.
    Exceptions are recorded by ``process_ended``, not by the ``with``. (What
    ``start_as_current_span`` does, without its two nested context managers per item.)"""
    span = tracer.start_span(
        f"process {worker}", context=parent_context(parent), kind=otel_trace.SpanKind.CONSUMER,
        attributes=item_attributes(worker, source_table, key, operation="process", pod=pod),
        record_exception=False, set_status_on_exception=False,
    )  # fmt: skip
    try:
        with use(span):
            yield span
    finally:
        span.end()


def process_ended(span: Any, report: Report, exc: BaseException | None) -> None:
    """Record on a ``process_span`` how its item ended: the handler's exception, a retry's
    delay, the outcome."""
    if exc is not None:
        span.record_exception(exc)
    if report.outcome == RETRIED_OUTCOME:
        span.add_event(RETRIED, {"dbworker.after_seconds": report.after or 0.0})
    set_outcome(span, report.outcome.value, report.summary or report.error)


def set_outcome(span: Any, outcome: str, error: str | None = None) -> None:
    """Record ``outcome`` on ``span``; an error status for failures, lost claims and retries."""
    assert otel_trace is not None
    span.set_attribute(OUTCOME, outcome)
    if outcome in ERROR_OUTCOMES:
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error or outcome))


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, for log records; None when none."""
    if otel_trace is None:
        return None
    ctx = otel_trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def recording_ids() -> tuple[str, str] | None:
    """``current_ids`` when the current span records (what an attempt's history row keeps:
    a span sampled away is never exported, so its ids would name nothing)."""
    if otel_trace is None or not otel_trace.get_current_span().is_recording():
        return None
    return current_ids()


def ids_of(header: str | None) -> tuple[str, str] | None:
    """(trace id, span id) in hex of a sampled span's ``traceparent`` (None for None, a
    malformed one, or one sampled away: never exported)."""
    if header is None:
        return None
    parts = header.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        sampled = int(parts[3], 16) & 1  # trace-flags: the sampled bit
    except ValueError:
        return None
    return (parts[1], parts[2]) if sampled else None


def consumer() -> Any:
    """The span kind of every span of an item (``SpanKind.CONSUMER``)."""
    assert otel_trace is not None
    return otel_trace.SpanKind.CONSUMER


def link(span_context: Any) -> Any:
    """A link to ``span_context`` (an earlier attempt's span)."""
    assert otel_trace is not None
    return otel_trace.Link(span_context)


@contextlib.contextmanager
def use(span: Any) -> Iterator[None]:
    """Make ``span`` current in a ``with`` block without ending it (``use_span`` without its
    exception handling: dbworker records an item's exception and status itself)."""
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)
