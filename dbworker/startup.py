"""What ``Coordinator.start`` checks and prepares before any loop runs.

The database URL must name a database that handler processes can share; each worker's
handler process configuration must pickle; the work tables must have this release's
layout. Then the database is made ready: SQLite switched to WAL, the pause table there.
A database that cannot be reached at start is not an error: the loops outlive outages.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dbworker import logs, redact, tracing
from dbworker.child import ChildConfig
from dbworker.sql import dialects, history, pauses, poolers, slots, upgrade
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")


def check_shared(url: URL) -> None:
    """``ValueError`` for an in-memory SQLite database, which handler processes cannot share."""
    if url.get_backend_name() != "sqlite":
        return
    database = url.database or ""
    if database in ("", ":memory:") or "mode=memory" in database or url.query.get("mode") == "memory":
        raise ValueError(
            "database_url is an in-memory SQLite database, which handler processes cannot "
            "share; use a file, e.g. 'sqlite:///work.db'"
        )


def child_config(
    worker: RegisteredWorker,
    url: URL,
    *,
    engine_options: Mapping[str, Any],
    transaction_pooler: bool,
    secrets: tuple[str, ...],
    history_logs: bool = True,
    history: bool = True,
) -> ChildConfig:
    """What ``worker``'s handler processes are given; ``ValueError`` when it cannot be pickled."""
    rendered = url.render_as_string(hide_password=False)
    config = ChildConfig(
        worker=worker.name,
        database_url=rendered,
        engine_options=(
            poolers.child_engine_options(engine_options, rendered) if transaction_pooler else dict(engine_options)
        ),
        handler=worker.handler,
        source=worker.source,
        parent_pid=os.getpid(),
        log=_child_logging(),
        retry=worker.retry,
        timeout=worker.timeout if worker.asynchronous else None,  # a sync handler's process is killed instead
        history_logs=history_logs,
        history=history,
        tracing=tracing.tracer() is not None,
    )
    try:
        pickle.dumps(config)
    except Exception as exc:
        raise ValueError(
            f"worker {worker.name!r}: its handler, source model or engine_options cannot be "
            f"pickled to handler processes ({redact.describe(exc, secrets)}); define "
            "handlers as module-level functions and pass only plain engine options"
        ) from None
    return config


def _child_logging() -> tuple[str, str, tuple[str, ...]] | None:
    """The command's logging set-up, for handler processes to repeat (None inside an application)."""
    active = logs.active()
    return None if active is None else (active[0], active[1], logs.masked())


def check_layout(engine: Engine, work_tables: list[sa.Table]) -> None:
    """``RuntimeError`` naming the fix when a work table has an older layout than this release's."""
    try:
        histories = [history.history_table(t) for t in work_tables]
        lacking = upgrade.lacking_columns(engine, [*work_tables, *histories])
        # A worker given limits since its tables were made has no slots table yet.
        limited = [s for s in map(slots.defined, work_tables) if s is not None]
        absent = upgrade.missing(engine, [*histories, *limited])
    except Exception as exc:  # noqa: BLE001 - the loops report database errors as they go
        log.info("dbworker: could not check the work tables' layout: %s", redact.describe(exc))
        return
    if lacking or absent:
        named = "; ".join(filter(None, [upgrade.describe_lacking(lacking), *(f"{t} does not exist" for t in absent)]))
        raise RuntimeError(
            f"work tables need an upgrade ({named}): run `dbworker migrate MODULE:ATTR` or "
            "coordinator.upgrade_worker_tables() (create_worker_tables() does it too) before start()"
        )


def prepare(engine: Engine) -> None:
    """SQLite in WAL mode; the pause table, for a database migrated by an older release."""
    if dialects.capabilities(engine.dialect).watches_commits:
        _sqlite_wal(engine)
    _pause_table(engine)


def _pause_table(engine: Engine) -> None:
    # Loops read pauses every second: a database migrated by an older release gets the table
    # here (idempotent); one that cannot be reached now or refuses DDL is logged, not fatal.
    try:
        if upgrade.missing(engine, [pauses.TABLE]):
            upgrade.ensure(engine, [pauses.TABLE])
    except Exception as exc:  # noqa: BLE001 - the loops outlive database errors
        log.info("dbworker: could not create the %s table: %s", pauses.TABLE_NAME, redact.describe(exc))


def _sqlite_wal(engine: Engine) -> None:
    # WAL lets handler processes read while another writes; the setting persists in the file.
    try:
        with engine.connect() as conn:
            dialects.sqlite_wal(conn)
    except Exception as exc:  # noqa: BLE001 - handler processes still work, with more waiting
        log.info("dbworker: could not switch SQLite to WAL: %s", redact.describe(exc))
