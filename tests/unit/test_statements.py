"""Every claim-path statement compiles for SQLite, PostgreSQL, MySQL and MariaDB without a server."""

from __future__ import annotations

import pytest

from dbworker.sql import dialects, statements
from tests.sql import samples

TABLE = samples.WORK
KEY = samples.KEY


@pytest.mark.parametrize("name", list(samples.SERVERS))
def test_claim_path_compiles(name: str) -> None:
    d = samples.dialect(name)
    caps = dialects.capabilities(d)
    st = statements.prebuilt(TABLE, KEY, caps)
    query = statements.eligible_candidates(st, KEY, statements.eligible_query(samples.ready_by_priority, KEY), caps, cursor=False)
    sql = str(query.compile(dialect=d))
    assert "items_work" in sql and "ORDER BY" in sql
    assert ("SKIP LOCKED" in sql) == (name != "sqlite")
    assert ("FOR UPDATE OF items" in sql) == (name in ("postgresql", "mysql"))
    first = str(st.first.compile(dialect=d))
    assert {"sqlite": "ON CONFLICT", "postgresql": "ON CONFLICT", "mysql": "IGNORE", "mariadb": "IGNORE"}[name] in first
    for stmt in (st.blocked, st.blocked_after, st.every, st.every_after, st.again, st.over, st.expired, st.renew_many, st.complete):
        assert str(stmt.compile(dialect=d))
    swept = statements.claimable(TABLE, KEY, statements.eligible_query(None, KEY), caps, after=7)
    assert "items.id >" in str(swept.compile(dialect=d))


def test_statements_are_built_once_per_table_and_server() -> None:
    caps = dialects.capabilities(samples.dialect("postgresql"))
    assert statements.prebuilt(TABLE, KEY, caps) is statements.prebuilt(TABLE, KEY, caps)
    other = dialects.capabilities(samples.dialect("mariadb"))
    assert statements.prebuilt(TABLE, KEY, other) is not statements.prebuilt(TABLE, KEY, caps)


def test_postgresql_one_statement_claim_compiles() -> None:
    d = samples.dialect("postgresql")
    caps = dialects.capabilities(d)
    assert caps.gen_random_uuid
    st = statements.prebuilt(TABLE, KEY, caps)
    for stmt in (st.one_shot, st.one_shot_after, st.one_shot_keys):
        assert stmt is not None
        sql = str(stmt.statement.compile(dialect=d))
        assert "FOR UPDATE OF items SKIP LOCKED" in sql
        assert "ON CONFLICT (source_id) DO UPDATE" in sql and "RETURNING" in sql
        assert "gen_random_uuid()" in sql
    old = samples.dialect("postgresql", (12, 9))
    assert statements.prebuilt(TABLE, KEY, dialects.capabilities(old)).one_shot is None  # no server-made tokens
    assert statements.prebuilt(TABLE, KEY, dialects.capabilities(samples.dialect("mariadb"))).one_shot is None


def test_claims_by_key_compare_the_notified_text_as_the_key_type() -> None:
    d = samples.dialect("postgresql")
    st = statements.prebuilt(TABLE, KEY, dialects.capabilities(d))
    assert st.one_shot_keys is not None
    sql = str(st.one_shot_keys.statement.compile(dialect=d))
    assert "items.id = ANY (CAST(%(dbw_keys)s::TEXT[] AS INTEGER[]))" in sql


def test_claims_by_key_elsewhere_list_the_key_values() -> None:
    d = samples.dialect("mysql", (8, 0, 36))
    caps = dialects.capabilities(d)
    st = statements.prebuilt(TABLE, KEY, caps)
    query = statements.named_candidates(st, KEY, statements.eligible_query(None, KEY), caps, [3, 4])
    compiled = query.compile(dialect=d)
    assert "items.id IN" in str(compiled) and compiled.params["id_1"] == [3, 4]


def test_an_eligible_query_must_be_a_select() -> None:
    with pytest.raises(TypeError, match="must return a select"):
        statements.eligible_query(lambda: "SELECT 1", KEY)  # type: ignore[arg-type,return-value]


def test_an_eligible_query_s_own_order_is_seen() -> None:
    # statements.is_ordered reads a private attribute of SQLAlchemy's Select (no public
    # reader exists): this fails if a release renames it.
    assert statements.is_ordered(samples.ready_by_priority())
    assert not statements.is_ordered(statements.eligible_query(None, KEY))
    assert not statements.is_ordered(samples.ready_by_priority().order_by(None))
