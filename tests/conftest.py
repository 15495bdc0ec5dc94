"""The `db` fixture: every behavioural test runs on SQLite (file), PostgreSQL and MariaDB.

Each test gets a clean database of its own: a fresh SQLite file, a fresh PostgreSQL database
holding a schema of the same name (selected through the URL's search_path, so handler
processes land in it too) or a fresh MariaDB database. Names are random so tests running at
once (``make test`` runs them on parallel workers) never collide. PostgreSQL's notifications
reach every session of a database that LISTENs, whatever its schema: a database per test keeps
one test's NOTIFYs (``rows:items [1]``) from waking, and so helping, another test's coordinator,
and lets a test find its own sessions by ``current_database()``.

The integration and chaos tests take a fourth `db`, ``pgbouncer``: PostgreSQL through PgBouncer
in transaction mode (tests/pooler.py), in the same pass as the others.

Every test is marked with the servers it needs (``uses_postgres``, ``uses_mariadb``), so
``make test-fast`` can leave them out; tests marked ``slow`` are started first, so parallel
workers run the short ones beside them instead of waiting for them at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import sessionmaker

from tests import databases, pooler
from tests.scheduling import pytest_xdist_make_scheduler  # noqa: F401 - make test's --dist loadgroup

PG_ADMIN_URL = os.environ.get("DBWORKER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MARIADB_ADMIN_URL = os.environ.get("DBWORKER_TEST_MARIADB", "mysql+pymysql://root@127.0.0.1:3306/test")
BACKENDS = ("sqlite", "postgresql", "mariadb")
# PostgreSQL through PgBouncer: a `db` of the integration and chaos tests (tests/pooler.py).
POOLED = "pgbouncer"


@dataclass
class Database:
    """One clean database for one test: its URL and an engine/sessionmaker on it."""

    backend: str
    url: str
    engine: Engine = field(repr=False)

    @property
    def session_factory(self) -> sessionmaker:  # type: ignore[type-arg]
        return sessionmaker(self.engine)


def _postgres(name: str) -> Iterator[Database]:
    try:
        server = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        admin.dispose()
        url = f"{server}?options=-csearch_path%3D{name}"
        engine = sa.create_engine(url, pool_pre_ping=True)
        try:
            yield Database("postgresql", url, engine)
        finally:
            engine.dispose()
    finally:
        databases.shared().give_back(name)  # dropped WITH (FORCE): killed processes leave sessions


def _postgres_pooled(name: str) -> Iterator[Database]:
    # Through PgBouncer (tests/pooler.py): a database per test, since it drops search_path;
    # routed() tells the coordinators this test (and the processes it starts) builds.
    url = pooler.shared().url(name)
    try:
        with pooler.routed():
            engine = sa.create_engine(url, pool_pre_ping=True, **pooler.engine_options(url))
            try:
                yield Database("postgresql", url, engine)
            finally:
                engine.dispose()
    finally:
        databases.shared().give_back(name)


def _mariadb(name: str) -> Iterator[Database]:
    admin = sa.create_engine(MARIADB_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}`")
    url = MARIADB_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    engine = sa.create_engine(url, pool_pre_ping=True)
    try:
        yield Database("mariadb", url, engine)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        admin.dispose()


def _sqlite(directory: Path) -> Iterator[Database]:
    url = f"sqlite:///{directory / 'dbworker-test.sqlite'}"
    engine = sa.create_engine(url)
    try:
        yield Database("sqlite", url, engine)
    finally:
        engine.dispose()


def open_database(backend: str, tmp_path: Path) -> Iterator[Database]:
    """Generator behind the `db` fixture; also usable for a second database in one test."""
    # PostgreSQL's databases are created ahead and dropped behind by tests/databases.py.
    if backend == "postgresql":
        yield from _postgres(databases.shared().take())
    elif backend == POOLED:
        yield from _postgres_pooled(databases.shared().take())
    elif backend == "mariadb":
        yield from _mariadb(databases.new_name())
    else:
        yield from _sqlite(tmp_path)


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    yield from open_database(request.param, tmp_path)


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Database]:
    """PostgreSQL only, for tests whose subject exists only there (restarts, query plans)."""
    yield from open_database("postgresql", tmp_path)


# Fixtures that run a test on one server, and the fixtures whose parameter names the server.
_SERVER_FIXTURES = {"pg": "postgresql", "pg_db": "postgresql", "pooled": "postgresql"}
_BACKEND_PARAMETERS = ("db", "appdb", "appdb_all", "system")
_MARKERS = {"postgresql": "uses_postgres", POOLED: "uses_postgres", "mariadb": "uses_mariadb"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the servers it needs; start the ``slow`` ones first."""
    for item in items:
        params = getattr(item, "callspec", None)
        servers = {v for k, v in (params.params.items() if params else ()) if k in _BACKEND_PARAMETERS}
        servers |= {s for f, s in _SERVER_FIXTURES.items() if f in getattr(item, "fixturenames", ())}
        for server in sorted(servers & set(_MARKERS)):
            item.add_marker(_MARKERS[server])
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept
