"""The worker process's one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

It serves a registry ``metrics`` filled and verdicts ``health`` decided; it decides
nothing itself. Requests are answered from a daemon thread per connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from dbworker.pod import health

log = logging.getLogger("dbworker.http")

VerdictSource = Callable[[], health.Verdict]


class HealthServer:
    """A running server; ``port`` is the bound port (useful when asked for port 0)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry,
        liveness: VerdictSource,
        readiness: VerdictSource,
    ) -> None:
        handler = _handler_class(registry, liveness, readiness)
        # Raises OSError when the port is taken; the command turns that into one line.
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="dbworker-http",
            daemon=True,
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()


def _handler_class(
    registry: CollectorRegistry, liveness: VerdictSource, readiness: VerdictSource
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "dbworker"

        def do_GET(self) -> None:  # the name http.server calls
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(registry), content_type)
            elif path == "/healthz":
                self._verdict(liveness())
            elif path == "/readyz":
                self._verdict(readiness())
            else:
                self._send(404, b"not found; try /metrics, /healthz or /readyz\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _verdict(self, verdict: health.Verdict) -> None:
            body = (verdict.reason + "\n").encode()
            self._send(200 if verdict.ok else 503, body)

        def _send(
            self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # base signature
            # Probes hit every few seconds; access lines would drown the useful log.
            log.debug("%s " + format, self.address_string(), *args)

    return Handler
