"""Creating work tables and upgrading them from older layouts, safe from many processes at once.

Each step looks before it changes and runs under a server-side lock (PostgreSQL, MySQL/MariaDB);
on SQLite, whose DDL is atomic, a step that loses a race finds its work done. The current
layout is ``tables``'; the trigger DDL this installs is ``notify``'s.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dbworker.sql import dialects
from dbworker.sql.tables import ADDED_COLUMNS

log = logging.getLogger("dbworker")

_LOCK_NAME = "dbworker_upgrade"
_LOCK_KEY = 0x6462776B  # "dbwk": one advisory lock key for every dbworker schema change
_ATTEMPTS = 20


@contextlib.contextmanager
def _schema_lock(conn: Connection) -> Iterator[None]:
    """Serialise schema changes across processes where the server offers a named lock."""
    name = conn.dialect.name
    if name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_lock(_LOCK_KEY)))
        try:
            yield
        finally:
            conn.rollback()
            conn.execute(sa.select(sa.func.pg_advisory_unlock(_LOCK_KEY)))
            conn.commit()
    elif name in ("mysql", "mariadb"):
        got = conn.execute(sa.select(sa.func.get_lock(_LOCK_NAME, 300))).scalar()
        if got != 1:
            raise RuntimeError("could not take the dbworker schema lock within 300 s")
        try:
            yield
        finally:
            conn.execute(sa.select(sa.func.release_lock(_LOCK_NAME)))
            conn.commit()
    else:
        yield


def _indexes(conn: Connection, table: sa.Table) -> set[tuple[str, ...]]:
    return {
        tuple(str(c) for c in ix["column_names"])
        for ix in sa.inspect(conn).get_indexes(table.name, schema=table.schema)
    }


def _columns(conn: Connection, table: sa.Table) -> set[str]:
    return {str(c["name"]) for c in sa.inspect(conn).get_columns(table.name, schema=table.schema)}


def _add_column(conn: Connection, table: sa.Table, column: sa.Column[Any]) -> None:
    # The column's DDL as CREATE TABLE would write it (type, server default, nullability).
    spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {conn.dialect.identifier_preparer.format_table(table)} ADD COLUMN {spec}")


def _has_table(conn: Connection, table: sa.Table) -> bool:
    return sa.inspect(conn).has_table(table.name, schema=table.schema)


def _apply(conn: Connection, table: sa.Table, done: list[str]) -> None:
    """Bring one table to the current layout, one committed step at a time, each added to
    ``done`` once committed (so a step a lost race interrupts later is still reported).
    """
    def step(change: str) -> None:
        conn.commit()
        done.append(change)

    if not _has_table(conn, table):
        table.create(conn)
        step(f"created {table.name}")
        return
    have = _columns(conn, table)
    for name in ADDED_COLUMNS:
        if name not in have:
            _add_column(conn, table, table.c[name])
            step(f"added column {table.name}.{name}")
    present = _indexes(conn, table)
    for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
        if tuple(c.name for c in index.columns) not in present:
            index.create(conn)
            step(f"added index {index.name}")
    conn.commit()


def ensure(engine: Engine, tables: Iterable[sa.Table]) -> list[str]:
    """Create or upgrade ``tables``; return the changes made (empty when all was current).

    The steps, in order: 1. create the work tables that do not exist (with every column and
    index of the current layout); 2. add the columns a table lacks (``tables.ADDED_COLUMNS``:
    0.2.0's lifecycle columns); 3. add the indexes it lacks (0.1.0's ``execution_status``
    index on tables created by 0.0.1, 0.2.0's ``not_before`` index).

    Transient errors and lost races (another process created the same thing first) are
    retried; the end state is checked, so every concurrent caller succeeds.
    """
    changes: list[str] = []
    for table in tables:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                with engine.connect() as conn, _schema_lock(conn):
                    _apply(conn, table, changes)
                break
            except sa.exc.DBAPIError as exc:
                # "already exists" after a lost race, or a busy/locked database: look again.
                if attempt == _ATTEMPTS:
                    raise
                if not dialects.is_transient(exc):
                    log.debug("schema step for %s raced (%s); checking again", table.name, type(exc).__name__)
                time.sleep(min(0.05 * attempt, 1.0))
    for change in changes:
        log.info("dbworker schema: %s", change)
    return changes


def current(engine: Engine, table: sa.Table) -> bool:
    """True when ``table`` exists with every index of the current layout."""
    with engine.connect() as conn:
        if not _has_table(conn, table):
            return False
        present = _indexes(conn, table)
        return set(ADDED_COLUMNS) <= _columns(conn, table) and all(
            tuple(c.name for c in ix.columns) in present for ix in table.indexes
        )


def lacking_columns(engine: Engine, tables: Iterable[sa.Table]) -> dict[str, list[str]]:
    """Tables that exist but lack columns of the current layout: name -> the missing columns
    (``describe_lacking`` words it for a message).
    """
    inspector = sa.inspect(engine)
    lacking: dict[str, list[str]] = {}
    for table in tables:
        if inspector.has_table(table.name, schema=table.schema):
            have = {str(c["name"]) for c in inspector.get_columns(table.name, schema=table.schema)}
            absent = [name for name in ADDED_COLUMNS if name not in have]
            if absent:
                lacking[table.name] = absent
    return lacking


def describe_lacking(lacking: dict[str, list[str]]) -> str:
    """``lacking_columns``' answer in words: ``items_work lacks attempts, not_before; ...``."""
    return "; ".join(f"{table} lacks {', '.join(columns)}" for table, columns in sorted(lacking.items()))


def missing(engine: Engine, tables: Iterable[sa.Table]) -> list[str]:
    """The names of ``tables`` that do not exist in the database yet (one schema inspection)."""
    inspector = sa.inspect(engine)
    return [t.name for t in tables if not inspector.has_table(t.name, schema=t.schema)]


def install_notify_triggers(engine: Engine, tables: Iterable[sa.Table]) -> list[str]:
    """Install the PostgreSQL wake-up trigger on each source table, under the schema lock."""
    from dbworker.sql import notify

    unique = list({id(t): t for t in tables}.values())
    if engine.dialect.name != "postgresql":
        return []
    with engine.connect() as conn, _schema_lock(conn):
        changes = notify.install_triggers(conn, unique)
    for change in changes:
        log.info("dbworker schema: %s", change)
    return changes
