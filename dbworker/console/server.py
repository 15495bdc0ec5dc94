"""``dbworker console``: serve the console with uvicorn until SIGTERM/SIGINT.

The command has checked its options (``pod.options``: tokens, a loopback address without
them) and the database and tables (``pod.app``); this checks that the address can be
listened on (a ``ValueError`` naming the option, which the command reports as exit 2).
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType

import uvicorn

import dbworker
from dbworker.console import app

log = logging.getLogger("dbworker.console")


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    tokens: Mapping[str, str] = field(default_factory=dict, repr=False)
    read_only: bool = False
    trace_url: str | None = None  # tracelinks' template (checked)


def serve(coordinator: dbworker.Coordinator, config: Config) -> int:
    """Serve until SIGINT/SIGTERM; 0 after a clean stop."""
    check_port(config.host, config.port)
    application = app.build(coordinator, tokens=dict(config.tokens), read_only=config.read_only,
                            trace_url=config.trace_url)
    mode = "read-only" if config.read_only else "actions allowed"
    signin = f"{len(config.tokens)} token(s)" if config.tokens else "no token (loopback only)"
    log.info("dbworker console on http://%s:%d/ (%s, %s)", config.host, config.port, signin, mode)
    # log_config=None keeps the command's logging (its format, its masking of secrets).
    _Server(uvicorn.Config(application, host=config.host, port=config.port, log_config=None, access_log=False)).run()
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, except that SIGTERM/SIGINT end it cleanly (exit 0) instead of being
    raised again once it has shut down; a second SIGINT still forces the exit."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def check_port(host: str, port: int) -> None:
    """``ValueError`` naming the option when ``host:port`` cannot be listened on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"--port {port}: the port is in use on {host}; choose another --port") from None
            raise ValueError(f"--host {host!r} --port {port}: cannot listen there ({exc.strerror}); check --host") from None
