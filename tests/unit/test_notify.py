"""NOTIFY payloads both ways, and the trigger DDL's quoting."""

from __future__ import annotations

import types

import pytest
import sqlalchemy as sa

from dbworker import tuning
from dbworker.sql import notify
from dbworker.wakeups import outbox
from tests.sql import samples


def test_notification_payloads_name_the_table_and_maybe_the_row() -> None:
    assert notify.source_change('rows:items ["42", "a b,c"]', "items") == (True, ["42", "a b,c"])
    assert notify.source_change("rows:items_old [\"42\"]", "items") == (False, [])
    for unreadable in ("rows:items [oops", 'rows:items {"a": 1}', 'rows:items ["1", 2]'):
        with pytest.raises(notify.Malformed):  # never sent by dbworker: ignored, counted
            notify.source_change(unreadable, "items")
    assert notify.source_change("items 42", "items") == (False, [])  # no such payload
    assert notify.source_change("items", "items") == (True, [])  # too many rows to name
    assert notify.source_change("items_old 42", "items") == (False, [])
    assert notify.source_change("done:items", "items") == (False, [])


def test_items_claimable_again_are_named_by_table_and_key() -> None:
    assert notify.claimable_again("again:items 42", "items") == (True, ["42"])
    assert notify.claimable_again("again:items a b", "items") == (True, ["a b"])  # keys may hold spaces
    assert notify.claimable_again("again:items_old 42", "items") == (False, [])
    assert notify.claimable_again("items 42", "items") == (False, [])


def test_done_announcements_name_the_ended_items_while_they_are_few() -> None:
    assert notify.done_payloads({"hash": {"7", "12"}, "compare": None}) == [
        "done:compare", "done:hash 12", "done:hash 7",
    ]  # fmt: skip


def _ddl(table: sa.Table) -> list[str]:
    conn = types.SimpleNamespace(dialect=samples.dialect("postgresql"))
    return notify.trigger_statements(conn, table)  # type: ignore[arg-type]


def test_trigger_ddl_quotes_every_identifier() -> None:
    table = sa.Table("Odd Items", sa.MetaData(), sa.Column("Key", sa.Integer, primary_key=True), schema="My Schema")
    function, drop, create, *_ = _ddl(table)
    assert function.startswith('CREATE OR REPLACE FUNCTION "My Schema"."dbworker_notify_Odd Items"() RETURNS trigger')
    assert 'SELECT "Key"::text AS k FROM dbworker_rows LIMIT 65' in function
    assert "pg_notify('dbworker', 'rows:' || TG_TABLE_NAME || ' ' || keys)" in function
    assert drop == 'DROP TRIGGER IF EXISTS dbworker_notify ON "My Schema"."Odd Items"'
    assert create.endswith('FOR EACH STATEMENT EXECUTE FUNCTION "My Schema"."dbworker_notify_Odd Items"()')


def test_trigger_ddl_refuses_a_key_name_that_would_end_the_dollar_quoted_body() -> None:
    table = sa.Table("items", sa.MetaData(), sa.Column("a$$b", sa.Integer, primary_key=True))
    with pytest.raises(ValueError, match=r"\$\$"):
        _ddl(table)


def test_ended_items_are_batched_by_key_up_to_a_limit_then_as_some() -> None:
    ended: dict[str, set[str] | None] = {}
    outbox.add_ended(ended, "a", "1")
    outbox.add_ended(ended, "a", "2")
    outbox.add_ended(ended, "b", None)  # a key without a text form
    assert ended == {"a": {"1", "2"}, "b": None}
    for i in range(tuning.MAX_ANNOUNCED_KEYS + 1):  # one more than a batch names
        outbox.add_ended(ended, "c", str(i))
    assert ended["c"] is None
    outbox.add_ended(ended, "b", "3")  # "some" stays "some"
    assert ended["b"] is None
    assert notify.done_payloads({"a": {"2", "1"}, "b": None}) == ["done:a 1", "done:a 2", "done:b"]


def test_a_batch_whose_announcement_failed_is_merged_into_the_next() -> None:
    batch = outbox.EndedBatch()
    batch.add("hash", "1")
    batch.add("hash", "2")
    batch.add("compare", None)
    failed = batch.take()
    assert batch.take() == {}
    batch.add("hash", "3")
    batch.put_back(failed)
    pending = batch.take()
    assert pending == {"hash": {"1", "2", "3"}, "compare": None}
    assert notify.done_payloads(pending) == ["done:compare", "done:hash 1", "done:hash 2", "done:hash 3"]


def test_a_wake_up_key_is_checked_against_the_key_columns_type() -> None:
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    from dbworker.sql import keys

    md = sa.MetaData()
    ints = sa.Table("ints", md, sa.Column("id", sa.Integer, primary_key=True)).c.id
    bigs = sa.Table("bigs", md, sa.Column("id", sa.BigInteger, primary_key=True)).c.id
    uuids = sa.Table("uuids", md, sa.Column("id", sa.Uuid, primary_key=True)).c.id
    texts = sa.Table("texts", md, sa.Column("id", sa.String(20), primary_key=True)).c.id
    dates = sa.Table("dates", md, sa.Column("id", sa.Date, primary_key=True)).c.id
    pg, my, lite = postgresql.dialect(), mysql.dialect(), sqlite.dialect()
    assert keys.is_text_form("42", ints, pg) and keys.is_text_form("-7", ints, pg)
    for bad in ("1e5", "4.0", " 1", "1_0", "+1", "٣", "", "2147483648"):
        assert keys.is_text_form(bad, ints, pg) is False, bad
    assert keys.is_text_form("2147483648", bigs, pg) and not keys.is_text_form(str(2**63), bigs, pg)
    assert keys.is_text_form("2147483648", ints, lite)  # every SQLite integer is 64-bit
    u = "0b7e7f6e-6c1a-4b53-9d6a-2f0e6f2a9c11"
    assert keys.is_text_form(u, uuids, pg)
    assert keys.is_text_form(u.upper(), uuids, pg) is False  # not as PostgreSQL writes it
    assert keys.is_text_form(u.replace("-", ""), uuids, my)  # MySQL stores it as hex
    assert keys.is_text_form("nope", uuids, pg) is False
    assert keys.is_text_form("' OR 1=1 --", texts, pg)  # any text is a text key (bound, never spliced)
    assert keys.is_text_form("2024-01-01", dates, pg) is None  # unchecked type: names no row
