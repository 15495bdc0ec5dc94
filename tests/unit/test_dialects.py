"""Server capabilities by version, the server clock's parameters, and transient errors told from bugs."""

from __future__ import annotations

import sqlalchemy as sa

from dbworker.sql import dialects
from tests.sql import samples


def test_capabilities_by_server_version() -> None:
    assert dialects.capabilities(samples.dialect("postgresql")).skip_locked
    mariadb = dialects.capabilities(samples.dialect("mariadb"))
    assert mariadb.skip_locked and not mariadb.lock_of
    assert not dialects.capabilities(samples.dialect("mariadb", (10, 5, 1))).skip_locked
    assert not dialects.capabilities(samples.dialect("mysql", (5, 7, 40))).skip_locked
    assert not dialects.capabilities(samples.dialect("postgresql", (12, 9))).gen_random_uuid
    assert not dialects.capabilities(samples.dialect("sqlite")).skip_locked


def test_lease_seconds_are_bound_in_each_servers_unit() -> None:
    values = {name: dialects.capabilities(samples.dialect(name)).seconds_value(1.5) for name in samples.SERVERS}
    assert values == {"sqlite": "+1.500000 seconds", "postgresql": 1.5, "mysql": 1_500_000, "mariadb": 1_500_000}


def test_transient_errors_are_told_from_bugs() -> None:
    locked = sa.exc.OperationalError("stmt", {}, Exception("database is locked"))
    deadlock = sa.exc.OperationalError("stmt", {}, Exception(1213, "Deadlock found"))
    integrity = sa.exc.IntegrityError("stmt", {}, Exception("UNIQUE constraint failed"))
    assert dialects.is_transient(locked) and dialects.is_transient(deadlock)
    assert not dialects.is_transient(integrity)
    assert not dialects.is_transient(ValueError("x"))
    # a full pool's wait that ran out (QueuePool limit ... timed out): busy, not wrong
    assert dialects.is_transient(sa.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"))
