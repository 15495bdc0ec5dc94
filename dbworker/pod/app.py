"""The application as the commands need it: its Coordinator loaded from ``MODULE:ATTR``.

Also what is checked against that Coordinator before a command acts: which workers, the
concurrency and timing overrides, item IDs as its primary keys, a reachable database and
existing work tables. Every failure is a ``termination.CommandError``; parsing the options is
``options``' job, acting on them ``run``'s and ``admin``'s.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Dialect

import dbworker
from dbworker import settings
from dbworker.pod import options as opts
from dbworker.pod import termination
from dbworker.sql import history, keys, pauses, upgrade


def load_app(spec: str) -> dbworker.Coordinator:
    """Import ``MODULE:ATTR`` and return the Coordinator; ``CommandError`` (exit 2) otherwise."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise termination.CommandError(
            f"malformed MODULE:ATTR {spec!r}; e.g. myapp.jobs:coordinator"
        )
    # A console script's sys.path starts at its own directory; applications expect the
    # working directory, as with `python -m`.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise termination.CommandError(
                f"cannot import module {module_name!r} (from {spec!r}): no module named {exc.name!r}; "
                "check the name, the working directory and PYTHONPATH"
            ) from None
        raise termination.CommandError(
            f"importing {module_name!r} failed: {termination.one_line(exc)}"
        ) from None
    except BaseException as exc:  # an application's import-time failure is bad configuration
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise termination.CommandError(
            f"importing {module_name!r} failed: {termination.one_line(exc)}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise termination.CommandError(
                f"module {module_name!r} has no attribute {attr!r} (from {spec!r}); name the Coordinator object"
            ) from None
        except Exception as exc:  # a lazy attribute may build the Coordinator
            raise termination.CommandError(
                f"getting {spec!r} failed: {termination.one_line(exc)}"
            ) from None
    if not isinstance(obj, dbworker.Coordinator):
        raise termination.CommandError(
            f"{spec!r} is a {type(obj).__name__}, not a dbworker.Coordinator"
        )
    return obj


def select_workers(coordinator: dbworker.Coordinator, options: opts.Options) -> list[str]:
    """The workers to act on, checked against the registered ones.

    Raises ``CommandError`` (exit 2, reason ``UnknownWorker`` for a name the code does not
    register).
    """
    known = list(coordinator.workers)
    if not known:
        raise termination.CommandError(
            f"{options.app!r} registers no workers; decorate a handler with @coordinator.transactional_worker"
        )
    wanted: list[str] = list(options.values.get("worker") or [])
    for name in wanted:
        if name not in known:
            raise termination.CommandError(
                f"unknown worker {name!r} ({options.source('worker')}); known workers: {', '.join(known)}",
                reason=termination.UNKNOWN_WORKER,
            )
    return wanted or known


def apply_overrides(coordinator: dbworker.Coordinator, options: opts.Options) -> dict[str, int]:
    """Apply concurrency and timing overrides before start; return the slots per worker.

    Raises ``CommandError`` (exit 2; reason ``UnknownWorker`` for a ``--concurrency`` name the
    code does not register).
    """
    known = list(coordinator.workers)
    pairs: dict[str, int] = options.values.get("concurrency") or {}
    processes: dict[str, int] = options.values.get("processes") or {}
    for key, named in (("concurrency", pairs), ("processes", processes)):
        for name in named:
            if name not in known:
                raise termination.CommandError(
                    f"unknown worker {name!r} in {options.source(key)}; known workers: {', '.join(known)}",
                    reason=termination.UNKNOWN_WORKER,
                )
    for name, n in pairs.items():
        coordinator.set_concurrency(name, n)
    for name, n in processes.items():
        try:
            coordinator.set_processes(name, n)
        except ValueError as exc:
            raise termination.CommandError(f"{options.source('processes')}: {exc}") from None
    given = {k: v for k in settings.FIELDS if (v := options.values.get(k)) is not None}
    if given:
        # A flag against the code's value: the rule is settings', the names are the sources.
        names = {k: options.source(k) if k in given else f"the application's {k}" for k in settings.FIELDS}
        try:
            settings.check_order(
                given.get("poll_seconds", coordinator.poll_seconds),
                given.get("max_poll_seconds", coordinator.max_poll_seconds),
                poll_field=names["poll_seconds"], max_field=names["max_poll_seconds"],
            )
        except ValueError as exc:
            raise termination.CommandError(str(exc)) from None
        try:
            coordinator.configure(**given)
        except ValueError as exc:
            raise termination.CommandError(
                f"{', '.join(options.source(k) for k in given)}: {exc}"
            ) from None
    return {name: pairs.get(name, coordinator.workers[name].concurrency) for name in known}


def apply_pooler(coordinator: dbworker.Coordinator, options: opts.Options) -> None:
    """Apply ``--transaction-pooler`` and ``--listen-url`` (only those given) before anything
    connects; ``CommandError`` (exit 2) naming the flag or variable. The URL is never echoed."""
    given = {k: v for k in ("transaction_pooler", "listen_url") if (v := options.values.get(k)) is not None}
    if not given:
        return
    try:
        coordinator.configure(**given)
    except ValueError as exc:
        raise termination.CommandError(f"{', '.join(options.source(k) for k in given)}: {exc}") from None


def convert_id(raw: str, source: Any, dialect: Dialect | None = None) -> Any:
    """``raw`` as the type of ``source``'s primary key (int, UUID or text) on ``dialect``;
    ``CommandError`` (exit 2) naming it when it is not one or out of the key's range."""
    try:
        return keys.parse(raw, source, dialect)
    except ValueError as exc:
        raise termination.CommandError(str(exc)) from None


def ping(coordinator: dbworker.Coordinator) -> None:
    """One database round trip; ``CommandError`` (exit 3) if the database does not answer."""
    try:
        coordinator.ping()
    except Exception as exc:  # any failure here means unreachable for the operator
        raise termination.CommandError(
            f"database unreachable: {termination.one_line(exc)}", termination.EXIT_DATABASE
        ) from None


def require_tables(
    coordinator: dbworker.Coordinator,
    workers: Sequence[str],
    options: opts.Options,
    *,
    hint: str = "",
) -> None:
    """``CommandError`` (exit 2) naming work tables (or dbworker's pause table) that do not
    exist yet or have an older layout, and the fix.
    """
    tables = [coordinator.workers[name].table for name in workers]
    try:
        missing = upgrade.missing(coordinator.engine, [*tables, *map(history.history_table, tables), pauses.TABLE])
        lacking = upgrade.lacking_columns(coordinator.engine, tables)
    except Exception as exc:
        raise termination.CommandError(
            f"reading the schema failed: {termination.one_line(exc)}",
            termination.database_code(exc),
        ) from None
    if missing:
        raise termination.CommandError(
            f"table(s) {', '.join(missing)} do not exist; run `dbworker migrate {options.app}` "
            f"first{hint}"
        )
    if lacking:
        named = upgrade.describe_lacking(lacking)
        raise termination.CommandError(
            f"work table(s) need an upgrade ({named}); run `dbworker migrate {options.app}` first{hint}"
        )
