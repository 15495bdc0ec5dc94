"""The asyncio driver for a database URL and the pool size: what async handlers' ``AsyncSession`` connects with.

One rule per server (docs/async.md): psycopg's async mode on PostgreSQL, aiomysql on
MySQL/MariaDB, aiosqlite on SQLite; a URL that already names an asyncio driver is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import URL, make_url

# The most connections an async handler process holds, all kept open between items: a
# connection is held for the row's read and the final commit only, so a few carry a hundred
# items awaiting I/O (benchmarks/io_bound: a pod of 2 x 100 at 10 connections, not 32, for
# ~0.8x the items/s of 15 each), and none is opened and closed again per burst, as
# SQLAlchemy's overflow connections beyond pool_size were.
ASYNC_POOL_MAX = 4

# Drivers SQLAlchemy runs under asyncio, and the one chosen per server when the URL names a sync one.
ASYNC_DRIVERS = frozenset({"aiosqlite", "psycopg", "psycopg_async", "asyncpg", "aiomysql", "asyncmy"})
_CHOSEN = {"sqlite": "aiosqlite", "postgresql": "psycopg", "mysql": "aiomysql", "mariadb": "aiomysql"}


def async_url(url: str | URL) -> URL:
    """``url`` with its driver swapped for the server's asyncio driver; ``ValueError`` for a
    server without one."""
    parsed = make_url(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    named = "+" in parsed.drivername  # else the default driver, which differs between SQLAlchemy releases
    if named and driver in ASYNC_DRIVERS and (backend == "postgresql" or driver != "psycopg"):
        return parsed
    chosen = _CHOSEN.get(backend)
    if chosen is None:
        raise ValueError(
            f"async handlers need an asyncio driver, and dbworker knows none for {backend!r} databases: "
            "use SQLite, PostgreSQL, MySQL or MariaDB, or a sync handler"
        )
    return parsed.set(drivername=f"{backend}+{chosen}")


def async_engine_options(options: Mapping[str, Any], capacity: int) -> dict[str, Any]:
    """``options`` for ``create_async_engine`` in a process running up to ``capacity`` items:
    unless the application sized the pool itself (``pool_size``, ``max_overflow`` or a
    ``poolclass``), at most ``min(capacity, ASYNC_POOL_MAX)`` connections, each kept open
    once opened. Coroutines beyond that wait for a connection."""
    if {"pool_size", "max_overflow", "poolclass"} & options.keys():
        return dict(options)
    return {**options, "pool_size": min(capacity, ASYNC_POOL_MAX), "max_overflow": 0}
