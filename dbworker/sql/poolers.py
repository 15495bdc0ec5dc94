"""Running behind a transaction pooler (PgBouncer ``pool_mode = transaction``): what changes.

A transaction pooler hands each transaction to any server connection, so nothing may
outlive a transaction: no server-side prepared statements (psycopg prepares a query after
five runs on one connection), no session settings, no session locks, no LISTEN. dbworker's
own SQL keeps to transaction scope everywhere; this module turns psycopg's preparing off and
recognises the errors a pooler gives when it was left on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

log = logging.getLogger("dbworker")

# What to set, as the library argument and the pod variable (for error and log lines).
HINT = (
    "prepared-statement errors: a transaction pooler (PgBouncer pool_mode=transaction) is between dbworker and "
    "PostgreSQL: set transaction_pooler=True on the Coordinator "
    "(DBWORKER_TRANSACTION_POOLER=true for the dbworker command)"
)
POLL_ONLY = (
    "dbworker: transaction_pooler is set and no listen_url: no LISTEN (a transaction pooler "
    "cannot deliver notifications), workers poll (pick-up waits up to max_poll_seconds); set "
    "listen_url (DBWORKER_LISTEN_URL) to a direct PostgreSQL URL for wake-ups"
)

# psycopg's error classes for a statement prepared on another server connection (26000) or
# twice on one (42P05), and their message text, as a handler process's report carries it.
_SQLSTATES = ("26000", "42P05")
_TEXT = re.compile(r"prepared statement \S+ (does not exist|already exists)", re.I)


def no_prepare(dbapi_connection: Any, *_: Any) -> None:
    # psycopg 3: None never prepares; other drivers have no such attribute and none to turn off.
    conn = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if hasattr(conn, "prepare_threshold"):
        conn.prepare_threshold = None


def no_prepared_statements(engine: Engine) -> None:
    """Make every connection ``engine`` hands out run without server-side prepared statements.

    On connect and at each checkout, so connections pooled before this call comply too;
    calling it again does nothing.
    """
    if engine.dialect.driver != "psycopg" or event.contains(engine, "checkout", no_prepare):
        return
    event.listen(engine, "connect", no_prepare, insert=True)
    event.listen(engine, "checkout", no_prepare)


def child_engine_options(options: Mapping[str, Any], database_url: str) -> dict[str, Any]:
    """``options`` for a handler process's ``create_engine`` with psycopg's preparing off
    (merged into any ``connect_args`` the application gives)."""
    merged = dict(options)
    if make_url(database_url).get_driver_name() == "psycopg":
        merged["connect_args"] = {**dict(merged.get("connect_args") or {}), "prepare_threshold": None}
    return merged


def is_prepared_statement_error(error: BaseException | str) -> bool:
    """True when ``error`` (an exception or a report's text) is a pooler's prepared-statement error."""
    if isinstance(error, BaseException):
        orig = getattr(error, "orig", error)
        if getattr(orig, "sqlstate", None) in _SQLSTATES:
            return True
        error = str(error)
    return _TEXT.search(error) is not None


def check_transaction_pooler(value: Any, database_url: URL) -> bool:
    """``transaction_pooler`` checked: a bool, and True only for PostgreSQL."""
    if not isinstance(value, bool):
        raise ValueError(f"transaction_pooler must be True or False, got {type(value).__name__}")
    if value and database_url.get_backend_name() != "postgresql":
        raise ValueError(
            "transaction_pooler=True is for PostgreSQL behind a transaction pooler (PgBouncer); "
            f"database_url is a {database_url.get_backend_name()} database: leave it False"
        )
    return value


def check_listen_url(value: str | URL | None, database_url: URL) -> URL | None:
    """``listen_url`` parsed and checked: a psycopg PostgreSQL URL, beside a PostgreSQL database.

    Messages never echo the value: it carries a password.
    """
    if value is None:
        return None
    example = "e.g. 'postgresql+psycopg://user:password@db-host:5432/app', the server itself, not the pooler"
    try:
        url = make_url(value)
    except Exception as exc:
        raise ValueError(f"listen_url is not a database URL ({type(exc).__name__}); use {example}") from None
    if database_url.get_backend_name() != "postgresql":
        raise ValueError(
            "listen_url is the connection for PostgreSQL's LISTEN; database_url is a "
            f"{database_url.get_backend_name()} database: leave listen_url unset"
        )
    if url.get_backend_name() != "postgresql" or url.get_driver_name() != "psycopg":
        raise ValueError(f"listen_url must be a PostgreSQL URL with the psycopg driver; use {example}")
    return url


class Hint:
    """Logs ``HINT`` once per worker when its database errors are a pooler's prepared-statement
    errors and ``transaction_pooler`` is off (the claims, renewals and completions all report here)."""

    def __init__(self, *, transaction_pooler: bool) -> None:
        self._pooled = transaction_pooler
        self._said: set[str] = set()

    def check(self, worker: str, error: BaseException | str) -> None:
        if self._pooled or worker in self._said or not is_prepared_statement_error(error):
            return
        self._said.add(worker)
        log.error("dbworker worker %s: %s", worker, HINT)
