"""OpenTelemetry in the example: the API's requests as spans, their writes carrying them.

When ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the demo sets it), the API sets an SDK tracer
provider exporting over OTLP/HTTP, opens a server span per request and instruments its
``sessionmaker`` with ``dbworker.otel.instrument``: an upload's rows carry the request's
trace to the worker service, whose claim and handler spans join it (docs/otel.md). The
demo's receiver (``Receiver``) keeps what arrives as JSON lines and prints one trace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

from fastapi import FastAPI, Request, Response
from sqlalchemy.orm import sessionmaker


def setup_api(app: FastAPI, session_factory: sessionmaker[Any]) -> bool:
    """Trace the API's requests and carry them with its writes; False when not asked to."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import dbworker.otel

    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    dbworker.otel.instrument(session_factory)
    tracer = trace.get_tracer("imagededup.api")
    app.router.on_shutdown.append(provider.shutdown)
    if importlib.util.find_spec("fastapi.telemetry") is not None:
        return True  # FastAPI (0.165+) opens the request's server span itself

    @app.middleware("http")
    async def traced(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        with tracer.start_as_current_span(f"{request.method} {request.url.path}", kind=trace.SpanKind.SERVER,
                                          attributes={"http.request.method": request.method,
                                                      "url.path": request.url.path}) as span:  # fmt: skip
            response = await call_next(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    return True


class Receiver:
    """An OTLP/HTTP receiver on loopback writing every span it gets to ``path`` (JSON lines)."""

    def __init__(self, path: Path) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.path = path
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    request = ExportTraceServiceRequest.FromString(body)
                except Exception:  # noqa: BLE001 - a payload this receiver cannot read is refused
                    self.send_response(400)
                    self.end_headers()
                    return
                lines = []
                for rs in request.resource_spans:
                    service = next((a.value.string_value for a in rs.resource.attributes
                                    if a.key == "service.name"), "?")  # fmt: skip
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            attrs = {a.key: a.value.string_value or a.value.int_value for a in s.attributes}
                            lines.append(json.dumps({
                                "service": service, "name": s.name, "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(), "parent_id": s.parent_span_id.hex() or None,
                                "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                                "attributes": attrs,
                            }))  # fmt: skip
                with lock, path.open("a") as f:
                    f.writelines(line + "\n" for line in lines)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def print_upload_trace(path: Path, out: TextIO) -> bool:
    """Print the trace of the first upload request that reached a handler, as a tree."""
    found = spans(path)
    for root in sorted((s for s in found if s["name"] == "POST /images"), key=lambda s: s["start"]):
        tree = [s for s in found if s["trace_id"] == root["trace_id"]]
        if not any(s["name"].startswith("process ") for s in tree):
            continue
        out.write(f"\none trace, from the upload request to the handlers (trace {root['trace_id']}):\n")
        _print(tree, root, 0, root["start"], out)
        return True
    out.write("\nno upload trace reached a handler (see the traces file)\n")
    return False


def _print(tree: list[dict[str, Any]], span: dict[str, Any], depth: int, t0: int, out: TextIO) -> None:
    key = span["attributes"].get("dbworker.key")
    outcome = span["attributes"].get("dbworker.outcome")
    extra = f" key={key} outcome={outcome}" if key is not None else ""
    out.write(f"  {'  ' * depth}{span['name']} [{span['service']}] +{(span['start'] - t0) / 1e6:.0f} ms, "
              f"{(span['end'] - span['start']) / 1e6:.1f} ms{extra}\n")  # fmt: skip
    children = sorted((s for s in tree if s["parent_id"] == span["span_id"]), key=lambda s: s["start"])
    for child in children[:6]:
        _print(tree, child, depth + 1, t0, out)
    if len(children) > 6:
        out.write(f"  {'  ' * (depth + 1)}... {len(children) - 6} more\n")
