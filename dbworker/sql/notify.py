"""The NOTIFY protocol both ways: payloads built and parsed, the trigger DDL, announcements.

The statements that send (``announce_*``, the trigger) and the ``LISTEN`` live here; the
thread that listens and hands payloads to the router is ``wakeups.postgres``'.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from dbworker import tuning
from dbworker.sql import changes, dialects, names

# Payloads on the ``dbworker`` channel:
# - ``rows:<table> <keys>``: sent once per inserting or updating statement by the trigger
#   ``install_triggers`` puts on a source table (by default, at every migration), naming
#   the changed rows' keys as PostgreSQL writes them as text, in a JSON array, up to
#   ``MAX_NAMED_ROWS`` of them;
# - ``<table>`` alone: more rows than that;
# - ``again:<table> <key>``: an item claimable again (given back by a coordinator, or reset
#   after it failed) that other pods' sweeps may have passed; unlike a row change it is
#   never the item's own handler writing;
# - ``done:<worker> <key>``: an item of a worker that others wait for ended, so dependent
#   workers of other coordinators claim at once, by key if their sweep passed it;
#   ``done:<worker>`` alone when the key has no text form or very many ended.
CHANNEL = "dbworker"
DONE = "done"  # + ":<worker>"
AGAIN = "again"  # + ":<table> <key>"
ROWS = "rows"  # + ":<table> <JSON array of keys>"
FUNCTION = "dbworker_notify"  # + "_<table>": one per source table, with its key column built in
TRIGGER = "dbworker_notify"  # on INSERT; + "_update" on UPDATE (one event per trigger with transition tables)
MAX_NAMED_ROWS = tuning.MAX_NAMED_ROWS  # keys a payload names at most (the reason: ``tuning``)
_TRANSITION_TABLE = "dbworker_rows"  # the trigger's name for the statement's new rows


def trigger_statements(conn: sa.Connection, table: sa.Table) -> list[str]:
    """DDL for the wake-up triggers on ``table``: one notification per statement, naming its rows.

    The keys let a coordinator claim exactly those rows, wherever its claim sweep stands: a
    row enabled (or inserted) below the sweep's cursor is found at once, not at the next
    wrap. One notification per statement, not per row: a bulk insert or update of a
    million rows would otherwise queue a million notifications for every listening pod.
    Over ``MAX_NAMED_ROWS`` rows are announced by the table's name alone (the loops sweep).
    PostgreSQL delivers notifications at commit, and only if the statement changed a row.

    Text, not SQLAlchemy constructs: Core has none for a PL/pgSQL function body or for a
    statement trigger with a transition table. So every identifier goes through the
    dialect's identifier preparer, every string literal through ``_literal``, the numbers
    are this module's constants, and the body is dollar-quoted: a key column whose quoted
    name holds ``$$`` would end it early, so it is a ``ValueError``.
    """
    prep = conn.dialect.identifier_preparer
    quoted = prep.format_table(table)
    [key] = list(table.primary_key.columns)
    function = prep.quote(names.identifier(f"{FUNCTION}_{table.name}"))
    if table.schema:
        function = f"{prep.quote_schema(table.schema)}.{function}"
    rows = prep.quote(_TRANSITION_TABLE)
    channel = _literal(CHANNEL)
    body = (
        "DECLARE n integer; keys text; BEGIN "
        f"SELECT count(*), json_agg(k)::text INTO n, keys FROM (SELECT {prep.quote(key.name)}::text AS k "
        f"FROM {rows} LIMIT {MAX_NAMED_ROWS + 1}) AS named; "
        f"IF n > {MAX_NAMED_ROWS} THEN PERFORM pg_notify({channel}, TG_TABLE_NAME); "
        f"ELSIF n > 0 THEN PERFORM pg_notify({channel}, {_literal(ROWS + ':')} || TG_TABLE_NAME || ' ' || keys); "
        "END IF; RETURN NULL; END"
    )
    if "$$" in body:
        raise ValueError(f"{table.name}.{key.name}: a key column named with '$$' cannot have the notify trigger")
    statements = [f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ {body} $$"]
    for trigger, event in ((TRIGGER, "INSERT"), (f"{TRIGGER}_update", "UPDATE")):
        name = prep.quote(trigger)
        statements += [
            f"DROP TRIGGER IF EXISTS {name} ON {quoted}",
            f"CREATE TRIGGER {name} AFTER {event} ON {quoted} REFERENCING NEW TABLE AS {rows} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        ]
    return statements


def _literal(text: str) -> str:
    """``text`` as a PostgreSQL string literal, its quotes doubled.

    Only for this module's constants, which hold no backslash: the literal means the same
    whatever the server's ``standard_conforming_strings``.
    """
    return "'" + text.replace("'", "''") + "'"


def claimable_again(payload: str, table: str) -> tuple[bool, list[str]]:
    """Whether ``payload`` is ``again:<table> <key>`` for ``table``, and the key's text."""
    prefix = f"{AGAIN}:{table} "
    if payload.startswith(prefix):
        return True, [payload[len(prefix) :]]
    return False, []


class Malformed(ValueError):
    """A payload naming a table in a form dbworker never sends (anyone may ``NOTIFY``)."""


def source_change(payload: str, table: str) -> tuple[bool, list[str]]:
    """Whether ``payload`` reports a change of ``table``, and the changed rows' key texts if named.

    ``Malformed`` when it names ``table`` but its keys are not a JSON array of strings.
    """
    if payload == table:
        return True, []  # too many rows to name
    rows = f"{ROWS}:{table} "
    if payload.startswith(rows):
        try:
            keys = json.loads(payload[len(rows) :])
        except ValueError:
            raise Malformed(f"the keys of {table} are not JSON") from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise Malformed(f"the keys of {table} are not an array of strings")
        return True, keys
    return False, []


def key_text(value: Any) -> str | None:
    """A key as PostgreSQL writes it as text, for the kinds whose text form is the same; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | str | uuid.UUID):
        return str(value)
    return None


def int_past(text: str, cursor: int) -> bool:
    """Whether ``text`` is an integer key beyond ``cursor`` (False when it is not an integer)."""
    return text.lstrip("-").isdigit() and int(text) > cursor


def install_triggers(conn: sa.Connection, tables: Iterable[sa.Table]) -> list[str]:
    """Install the wake-up trigger on each source table (PostgreSQL); return what was done.

    Looks first: a table whose two triggers exist and whose function has the current body
    is left alone, so a start or ``migrate`` that finds them in place takes no lock on it.
    """
    if not dialects.of(conn).notifies:
        return []
    done = []
    for table in tables:
        if installed(conn, table):
            continue
        for statement in trigger_statements(conn, table):
            conn.exec_driver_sql(statement)
        done.append(f"notify trigger on {table.name}")
    conn.commit()
    return done


def installed(conn: sa.Connection, table: sa.Table) -> bool:
    """Whether ``table`` has both wake-up triggers, calling a function with the current body."""
    create_function = trigger_statements(conn, table)[0]
    body = create_function.split("$$")[1].strip()
    found = conn.execute(
        sa.text(
            "SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgrelid = to_regclass(:table) AND t.tgname IN (:insert, :update) "
            "AND btrim(p.prosrc) = :body"
        ),
        {"table": conn.dialect.identifier_preparer.format_table(table), "insert": TRIGGER,
         "update": f"{TRIGGER}_update", "body": body},
    ).scalar_one()  # fmt: skip
    return int(found) == 2


def drop_triggers(conn: sa.Connection, tables: Iterable[sa.Table]) -> list[str]:
    """Remove the wake-up triggers and their functions (the opt-out); return what was done."""
    if not dialects.of(conn).notifies:
        return []
    prep = conn.dialect.identifier_preparer
    done = []
    for table in tables:
        had = conn.execute(
            sa.text("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(:table) AND tgname IN (:a, :b)"),
            {"table": prep.format_table(table), "a": TRIGGER, "b": f"{TRIGGER}_update"},
        ).scalar_one()
        for trigger in (TRIGGER, f"{TRIGGER}_update"):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {prep.quote(trigger)} ON {prep.format_table(table)}")
        function = prep.quote(names.identifier(f"{FUNCTION}_{table.name}"))
        if table.schema:
            function = f"{prep.quote_schema(table.schema)}.{function}"
        conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {function}()")
        if had:
            done.append(f"removed notify trigger on {table.name}")
    conn.commit()
    return done


def announce_rows(conn: sa.Connection, table: str, keys: Iterable[Any]) -> None:
    """Notify ``again:<table> <key>`` for each key with a text form (elsewhere: the change table).

    For items claimable again (given back, failed items reset) that other pods' sweeps may
    have passed. Sent with ``conn``'s transaction, when the caller commits it.
    """
    texts = (text for text in map(key_text, keys) if text is not None)
    payloads = [f"{AGAIN}:{table} {text}" for text, _ in zip(texts, range(MAX_NAMED_ROWS + 1), strict=False)]
    if not payloads:
        return
    if not dialects.of(conn).notifies:
        try:
            changes.write(conn, payloads)  # read by the other coordinators' change feeds
        except sa.exc.DBAPIError:
            pass  # no change table (not migrated): the statement alone failed; sweeps find them
        return
    send = sa.text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS TEXT[])) AS payload")
    conn.execute(send.bindparams(sa.bindparam("payloads", type_=postgresql.ARRAY(sa.Text()))),
                 {"channel": CHANNEL, "payloads": payloads})  # fmt: skip


def announce_table(conn: sa.Connection, table: str) -> None:
    """Tell every coordinator that ``table`` may have claimable rows anywhere (the payload
    naming no row: their loops look behind their cursors). Sent with ``conn``'s
    transaction; elsewhere written to the change table.
    """
    if dialects.of(conn).notifies:
        conn.execute(sa.select(sa.func.pg_notify(CHANNEL, table)))
        return
    try:
        changes.write(conn, [table])
    except sa.exc.DBAPIError:
        pass  # no change table (not migrated): the statement alone failed


def listen(driver_conn: Any) -> None:
    """``LISTEN`` on the channel, on a DBAPI (psycopg) connection in autocommit.

    ``CHANNEL`` is a constant lower-case identifier, so it needs no quoting.
    """
    driver_conn.execute(f"LISTEN {CHANNEL}")


def announce_done(driver_conn: Any, ended: dict[str, set[str] | None]) -> None:
    """Notify ``done_payloads(ended)`` on a DBAPI (psycopg) connection, in one statement."""
    driver_conn.execute(
        "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
        (CHANNEL, done_payloads(ended)),
    )


def done_payloads(ended: dict[str, set[str] | None]) -> list[str]:
    """``done:<worker> <key>`` for each ended item named, ``done:<worker>`` when unnamed."""
    payloads: list[str] = []
    for worker, keys in sorted(ended.items()):
        if keys:
            payloads += [f"{DONE}:{worker} {key}" for key in sorted(keys)]
        else:
            payloads.append(f"{DONE}:{worker}")
    return payloads
