"""A real OTLP/HTTP receiver for tests: decodes what exporters POST with ``opentelemetry-proto``.

``/v1/traces`` (ExportTraceServiceRequest) and ``/v1/metrics`` (ExportMetricsServiceRequest),
protobuf bodies, on a loopback port of its own; what arrived is kept as plain dicts.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return None if kind is None else getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    span = {
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_id": s.parent_span_id.hex() or None,
                        "kind": s.kind,
                        "attributes": _attrs(s.attributes),
                        "status": s.status.code,  # 0 unset, 1 ok, 2 error
                        "status_message": s.status.message,
                        "events": [{"name": e.name, "attributes": _attrs(e.attributes)} for e in s.events],
                        "links": [(lk.trace_id.hex(), lk.span_id.hex()) for lk in s.links],
                        "resource": resource,
                        "scope": ss.scope.name,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                    }
                    with self.lock:
                        self.spans.append(span)

    def add_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    with self.lock:
                        self.metrics.append({"name": m.name, "scope": sm.scope.name,
                                             "kind": m.WhichOneof("data")})  # fmt: skip

    def all_spans(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.spans)


@contextmanager
def receiver() -> Iterator[tuple[str, Received]]:
    """A running receiver: (its endpoint URL, what it received)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.add_traces(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                received.add_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
