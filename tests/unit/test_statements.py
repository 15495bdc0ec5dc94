"""Every claim-path statement compiles for SQLite, PostgreSQL, MySQL and MariaDB without a server."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect

from dbworker.sql import claims, dialects, tables
from tests.apps import basic

TABLE = tables.work_table("items", basic.Item)
KEY = basic.Item.__table__.c.id


def _dialect(name: str) -> tuple[Dialect, dialects.Capabilities]:
    d: Any
    if name == "postgresql":
        d = postgresql.psycopg.dialect()
        d.server_version_info = (15, 0)
    elif name == "mysql":
        d = mysql.pymysql.dialect()
        d.server_version_info = (8, 0, 36)
    elif name == "mariadb":
        d = mysql.pymysql.dialect()
        d.server_version_info = (10, 11, 6)
        d.is_mariadb = True
    else:
        d = sqlite.pysqlite.dialect()
        d.server_version_info = (3, 40, 0)
    return d, dialects.capabilities(d)


@pytest.mark.parametrize("name", ["sqlite", "postgresql", "mysql", "mariadb"])
def test_claim_path_compiles(name: str) -> None:
    d, caps = _dialect(name)
    query = claims.claimable(TABLE, KEY, claims.eligible_query(basic.ready_items, KEY), caps, after=7).limit(2)
    if caps.skip_locked:
        query = query.with_for_update(skip_locked=True, of=KEY.table if caps.lock_of else None)
    sql = str(query.compile(dialect=d))
    assert "items_work" in sql and "ORDER BY" in sql
    assert ("SKIP LOCKED" in sql) == (name != "sqlite")
    insert = caps.insert_ignoring_duplicate(TABLE, "source_id").values(
        source_id=1, execution_status="working", lease_expires_at=caps.now_plus(30)
    )
    compiled = str(insert.compile(dialect=d))
    assert {"sqlite": "ON CONFLICT", "postgresql": "ON CONFLICT", "mysql": "IGNORE", "mariadb": "IGNORE"}[name] in compiled
    for stmt in (
        sa.update(TABLE).values(lease_expires_at=caps.now_plus(10)),
        sa.select(caps.now()),
        claims.statements(TABLE, KEY, caps).blocked,
        claims.statements(TABLE, KEY, caps).blocked_after,
    ):
        assert str(stmt.compile(dialect=d))


def test_capabilities_by_server_version() -> None:
    assert _dialect("postgresql")[1].skip_locked
    assert _dialect("mariadb")[1].skip_locked and not _dialect("mariadb")[1].lock_of
    old = mysql.pymysql.dialect()
    old.server_version_info = (10, 5, 1)
    old.is_mariadb = True
    assert not dialects.capabilities(old).skip_locked
    mysql57 = mysql.pymysql.dialect()
    mysql57.server_version_info = (5, 7, 40)
    assert not dialects.capabilities(mysql57).skip_locked
    assert not _dialect("sqlite")[1].skip_locked


def test_transient_errors_are_told_from_bugs() -> None:
    locked = sa.exc.OperationalError("stmt", {}, Exception("database is locked"))
    deadlock = sa.exc.OperationalError("stmt", {}, Exception(1213, "Deadlock found"))
    integrity = sa.exc.IntegrityError("stmt", {}, Exception("UNIQUE constraint failed"))
    assert dialects.is_transient(locked) and dialects.is_transient(deadlock)
    assert not dialects.is_transient(integrity)
    assert not dialects.is_transient(ValueError("x"))


def test_postgresql_one_statement_claim_compiles() -> None:
    d, caps = _dialect("postgresql")
    assert caps.gen_random_uuid
    st = claims.statements(TABLE, KEY, caps)
    for stmt in (st.one_shot, st.one_shot_after, st.one_shot_keys):
        assert stmt is not None
        sql = str(stmt.statement.compile(dialect=d))
        assert "FOR UPDATE OF items SKIP LOCKED" in sql
        assert "ON CONFLICT (source_id) DO UPDATE" in sql and "RETURNING" in sql
        assert "gen_random_uuid()" in sql
    old = postgresql.psycopg.dialect()
    old.server_version_info = (12, 9)
    old_caps = dialects.capabilities(old)
    assert claims.statements(TABLE, KEY, old_caps).one_shot is None  # no server-made tokens: statements
    assert claims.statements(TABLE, KEY, _dialect("mariadb")[1]).one_shot is None


def test_claims_by_key_compare_the_notified_text_as_the_key_type() -> None:
    d, caps = _dialect("postgresql")
    st = claims.statements(TABLE, KEY, caps)
    assert st.one_shot_keys is not None
    sql = str(st.one_shot_keys.statement.compile(dialect=d))
    assert "items.id = ANY (CAST(%(dbw_keys)s::TEXT[] AS INTEGER[]))" in sql


def test_notification_payloads_name_the_table_and_maybe_the_row() -> None:
    from dbworker.sql import notify

    assert notify.source_change('rows:items ["42", "a b,c"]', "items") == (True, ["42", "a b,c"])
    assert notify.source_change("rows:items_old [\"42\"]", "items") == (False, [])
    assert notify.source_change("rows:items [oops", "items") == (True, [])  # unreadable: sweep
    assert notify.source_change("items 42", "items") == (True, ["42"])  # an earlier build's row trigger
    assert notify.source_change("items a b", "items") == (True, ["a b"])  # keys may hold spaces
    assert notify.source_change("items", "items") == (True, [])  # many rows, or an earlier release's trigger
    assert notify.source_change("items_old 42", "items") == (False, [])
    assert notify.source_change("done:items", "items") == (False, [])


def test_done_announcements_name_the_ended_items_while_they_are_few() -> None:
    from dbworker.sql import notify

    assert notify.done_payloads({"hash": {"7", "12"}, "compare": None}) == [
        "done:compare", "done:hash 12", "done:hash 7",
    ]  # fmt: skip
