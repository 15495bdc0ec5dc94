"""PgBouncer in transaction mode in front of the test PostgreSQL server (Debian's package).

The `db` fixture's ``pgbouncer`` case (the integration and chaos tests) goes through one
PgBouncer per test process, with a database per test (PgBouncer does not forward the
``options=-csearch_path`` the direct case isolates tests with). While such a test runs,
``DBWORKER_TEST_POOLER=pgbouncer`` is set (``routed``; the processes it starts inherit it) and
``coordinator_options`` gives the coordinators it builds ``transaction_pooler=True`` and the
direct server for LISTEN. ``Bouncer`` is also what the pooler's own tests start.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from tests.helpers import wait_until

SERVER_URL = os.environ.get("DBWORKER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
POOLER_ENV = "DBWORKER_TEST_POOLER"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# Engines the tests themselves open through PgBouncer: psycopg must not prepare either.
CONNECT_ARGS = {"prepare_threshold": None}


def enabled() -> bool:
    """Whether the test under way goes through PgBouncer (its `db` is ``pgbouncer``)."""
    return os.environ.get(POOLER_ENV, "") == "pgbouncer"


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """Mark this process, and those it starts meanwhile, as going through PgBouncer."""
    before = os.environ.get(POOLER_ENV)
    os.environ[POOLER_ENV] = "pgbouncer"
    try:
        yield
    finally:
        if before is None:
            del os.environ[POOLER_ENV]
        else:
            os.environ[POOLER_ENV] = before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bouncer:
    """One PgBouncer process (transaction mode, trust auth) on a free port, forwarding every
    database name to the test server."""

    def __init__(self) -> None:
        server = make_url(SERVER_URL)
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="dbworker-pgbouncer-"))
        self.directory.chmod(0o755)  # PgBouncer refuses root: it runs as postgres and reads these
        ini = self.directory / "pgbouncer.ini"
        users = self.directory / "users.txt"
        users.write_text(f'"{server.username or "postgres"}" ""\n')
        ini.write_text(
            "[databases]\n"
            f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 2000\n"
            "default_pool_size = 40\n"
            "ignore_startup_parameters = extra_float_digits\n"
            # PgBouncer's default 15 s refuses every client that long after a server restart,
            # past the chaos tests' 10 s leases (README, "PgBouncer / CloudNativePG").
            "server_login_retry = 1\n"
        )
        for f in (ini, users):
            f.chmod(0o644)
        self.log = self.directory / "pgbouncer.log"
        command = [PGBOUNCER, str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", pwd.getpwnam("postgres").pw_name]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        wait_until(self._accepts, timeout=30, what=f"PgBouncer on port {self.port} (log: {self.log})")

    def _accepts(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"PgBouncer exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True

    def url(self, database: str) -> str:
        """The test server's URL for ``database``, through this PgBouncer."""
        return _render(make_url(SERVER_URL).set(host="127.0.0.1", port=self.port, database=database))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)


_shared: Bouncer | None = None


def shared() -> Bouncer:
    """The PgBouncer of this test process, started on first use and stopped at exit."""
    global _shared
    if _shared is None:
        _shared = Bouncer()
        atexit.register(_shared.stop)
    return _shared


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def direct_url(url: str) -> str:
    """``url``'s database on the test server itself, not through PgBouncer."""
    return _render(make_url(SERVER_URL).set(database=make_url(url).database))


def coordinator_options(url: str) -> dict[str, Any]:
    """The Coordinator arguments a test application needs for ``url``: in a PgBouncer case, a
    URL that goes through PgBouncer gets ``transaction_pooler`` and the direct ``listen_url``."""
    if not enabled():
        return {}
    parsed, server = make_url(url), make_url(SERVER_URL)
    if parsed.get_backend_name() != "postgresql" or parsed.port == (server.port or 5432):
        return {}
    return {"transaction_pooler": True, "listen_url": direct_url(url)}


def direct_engine(url: str) -> sa.Engine:
    """An engine on ``url``'s database that does not go through PgBouncer (for LISTEN)."""
    return sa.create_engine(direct_url(url) if coordinator_options(url) else url, poolclass=sa.pool.NullPool)


def engine_options(url: str) -> dict[str, Any]:
    """``create_engine`` options for a test's own engine on ``url`` (none unless pooled)."""
    return {"connect_args": dict(CONNECT_ARGS)} if coordinator_options(url) else {}


def create_database(name: str) -> None:
    """``CREATE DATABASE name`` on the test server (a pooled test's own database)."""
    admin = sa.create_engine(SERVER_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()


def drop_database(name: str) -> None:
    """Drop a pooled test's database; FORCE ends PgBouncer's and killed processes' sessions."""
    admin = sa.create_engine(SERVER_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()
