"""The asyncio driver for a database URL: what async handlers' ``AsyncSession`` connects with.

One rule per server (docs/async.md): psycopg's async mode on PostgreSQL, aiomysql on
MySQL/MariaDB, aiosqlite on SQLite; a URL that already names an asyncio driver is kept.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

# Drivers SQLAlchemy runs under asyncio, and the one chosen per server when the URL names a sync one.
ASYNC_DRIVERS = frozenset({"aiosqlite", "psycopg", "psycopg_async", "asyncpg", "aiomysql", "asyncmy"})
_CHOSEN = {"sqlite": "aiosqlite", "postgresql": "psycopg", "mysql": "aiomysql", "mariadb": "aiomysql"}


def async_url(url: str | URL) -> URL:
    """``url`` with its driver swapped for the server's asyncio driver; ``ValueError`` for a
    server without one."""
    parsed = make_url(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if driver in ASYNC_DRIVERS and (backend == "postgresql" or driver != "psycopg"):
        return parsed
    chosen = _CHOSEN.get(backend)
    if chosen is None:
        raise ValueError(
            f"async handlers need an asyncio driver, and dbworker knows none for {backend!r} databases: "
            "use SQLite, PostgreSQL, MySQL or MariaDB, or a sync handler"
        )
    return parsed.set(drivername=f"{backend}+{chosen}")
