"""The one copy of the test suite's waiting, process and scraping helpers.

Tests wait on conditions with generous bounds, never on sleeps; a failed wait says what it
awaited and what it last saw.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 90.0


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``predicate`` until it returns something truthy; return that value.

    Exceptions raised by the predicate count as "not yet" (a server may be restarting);
    the last one is reported if the bound runs out.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - reported below if it persists
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last saw {last!r}")
        time.sleep(interval)


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``, ignoring a process that is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid: int) -> list[int]:
    """Direct child process ids of ``pid`` (from /proc)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def descendants_of(pid: int) -> list[int]:
    """Process ids under ``pid``, at any depth: handler processes are forked from a fork
    server that the coordinator started (dbworker.spawning), not by the coordinator itself."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    parent = dict((int(c), int(p)) for c, p in (line.split() for line in out.stdout.splitlines()))
    found, frontier = [], {pid}
    while frontier:
        below = [c for c, p in parent.items() if p in frontier]
        found += below
        frontier = set(below)
    return found


@contextlib.contextmanager
def logging_restored() -> Iterator[None]:
    """Undo what ``dbworker.logs.setup`` does to this process (other tests rely on caplog)."""
    from dbworker import logs

    loggers = [logging.getLogger("dbworker"), logging.getLogger()]
    saved = [(list(lg.handlers), lg.propagate, lg.level) for lg in loggers]
    active = logs.active()
    try:
        yield
    finally:
        for lg, (handlers, propagate, level) in zip(loggers, saved, strict=True):
            lg.handlers[:], lg.propagate, lg.level = handlers, propagate, level
        logs.restore(active)


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a PostgreSQL ``EXPLAIN (FORMAT JSON)`` plan, the root first."""
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes
