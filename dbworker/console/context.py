"""What every request handler of the console needs: the Coordinator, the options, the caller."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from starlette.requests import Request

import dbworker
from dbworker.console import filters, queries
from dbworker.console.auth import Auth, Throttle, Who
from dbworker.sql import keys


@dataclass(frozen=True)
class Console:
    """The application's Coordinator and how this console serves it."""

    coordinator: dbworker.Coordinator
    auth: Auth
    read_only: bool
    throttle: Throttle = field(default_factory=Throttle)  # failed sign-ins per client
    trace_url: str | None = None  # the trace UI's address template (tracelinks), or None


def console_of(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def who_of(request: Request) -> Who:
    """The caller the sign-in middleware found (every handler behind it has one)."""
    found: Who = request.state.who
    return found


def worker_or_404(console: Console, name: str) -> str:
    """``name`` if it is a registered worker; else 404 naming the registered ones."""
    if name not in console.coordinator.workers:
        known = ", ".join(console.coordinator.workers) or "none"
        raise HTTPException(404, f"unknown worker {name!r} (registered: {known})")
    return name


def writable(console: Console) -> None:
    """403 when the console is read-only."""
    if console.read_only:
        raise HTTPException(403, "the console is read-only (--read-only): actions are refused")


def acting_on(request: Request, worker: str) -> tuple[Console, str]:
    """The console and the registered worker ``worker`` for an action (or its confirmation
    page): 404 for an unknown worker, 403 when the console is read-only."""
    console = console_of(request)
    name = worker_or_404(console, worker)
    writable(console)
    return console, name


def key_or_400(console: Console, worker: str, raw: str, *, field: str = "id") -> Any:
    """``raw`` as a key of ``worker``'s source: 400 when it is not one written plainly, 404 when
    no item can have it (an integer beyond the column's range)."""
    try:
        return queries.convert_id(console.coordinator, worker, raw)
    except keys.OutOfRange as exc:
        raise HTTPException(404, f"{field}: {exc}") from None
    except ValueError as exc:
        raise HTTPException(400, f"{field}: {exc}") from None


def filter_or_400(console: Console, worker: str, params: Iterable[tuple[str, str]]) -> filters.ItemFilter:
    """The item filter in ``params`` (``filters.parse``): 400 naming the parameter that is wrong."""
    try:
        return filters.parse(params, console.coordinator.workers[worker].source, console.coordinator.engine.dialect)
    except filters.FilterError as exc:
        raise HTTPException(400, str(exc)) from None
