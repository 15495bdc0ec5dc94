"""Runs the ``basic`` test application's coordinator as a separate process until SIGTERM.

``python -m tests.apps.runner URL [--lease S] [--concurrency N] [--eligible ready]``.
Prints "started" once running; SIGTERM stops it (drain), SIGKILL is what crash tests send.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from dbworker import Coordinator
from tests.apps import basic


def serve(coordinator: Coordinator) -> None:
    """Start ``coordinator``, print "started", run until SIGTERM, stop it, print "stopped"."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    coordinator.start()
    print("started", flush=True)
    done.wait()
    coordinator.stop(timeout=10)
    print("stopped", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--lease", type=float, default=30)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--eligible", choices=["all", "ready"], default="all")
    parser.add_argument("--create-tables", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if args.create_tables:
        basic.build(args.url, app_tables=False)  # create_worker_tables() only; then exit
        print("created", flush=True)
        return
    coordinator = basic.build(
        args.url,
        concurrency=args.concurrency,
        eligible=basic.ready_items if args.eligible == "ready" else None,
        lease_seconds=args.lease,
        poll_seconds=0.05,
        max_poll_seconds=0.5,
    )
    serve(coordinator)


if __name__ == "__main__":
    main()
