"""Creating work tables and upgrading them from older layouts, safe from many processes at once.

Each step looks before it changes and runs under a server-side lock: on PostgreSQL a
transaction-scoped advisory lock taken by each step's own transaction (so it holds through a
transaction pooler), on MySQL/MariaDB a named lock around the steps (their DDL commits by
itself); on SQLite, whose DDL is atomic, a step that loses a race finds its work done. The current
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

from dbworker.sql import dialects, tables
from dbworker.sql.tables import ADDED_COLUMNS, FILLED_FROM, added_columns

log = logging.getLogger("dbworker")

_LOCK_NAME = "dbworker_upgrade"
_LOCK_KEY = 0x6462776B  # "dbwk": one advisory lock key for every dbworker schema change
_ATTEMPTS = 20


def _step_lock(conn: Connection) -> None:
    """PostgreSQL: the schema lock for the transaction ``conn`` is in (begun here if none);
    its commit or rollback releases it. Called first in every step, before it looks."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_LOCK_KEY)))


@contextlib.contextmanager
def _schema_lock(conn: Connection) -> Iterator[None]:
    """MySQL/MariaDB: a named lock around several steps (their DDL commits implicitly, so no
    transaction could hold a lock across one). PostgreSQL's is ``_step_lock``, per step."""
    name = conn.dialect.name
    if name in ("mysql", "mariadb"):
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


def _fill(conn: Connection, table: sa.Table, name: str, source: str) -> None:
    """Give the rows of ``table`` a new column ``name``'s value from ``source`` (where set):
    one UPDATE, once, when the column is added (``changed_at`` from ``ended_at``)."""
    c = table.c
    conn.execute(sa.update(table).where(c[source].is_not(None)).values({name: c[source]}))


def _has_table(conn: Connection, table: sa.Table) -> bool:
    return sa.inspect(conn).has_table(table.name, schema=table.schema)


def _apply(conn: Connection, table: sa.Table, done: list[str]) -> None:
    """Bring one table to the current layout, one committed step at a time, each added to
    ``done`` once committed (so a step a lost race interrupts later is still reported).

    Each step is one transaction: lock, look, change, commit.
    """
    while True:
        _step_lock(conn)
        change = _next_step(conn, table)
        conn.commit()
        if change is None:
            return
        done.append(change)


def _next_step(conn: Connection, table: sa.Table) -> str | None:
    """Make the first change ``table`` needs and say what it was; None when it is current."""
    if not _has_table(conn, table):
        table.create(conn)
        return f"created {table.name}"
    have = _columns(conn, table)
    for name in ADDED_COLUMNS:
        if name in table.c and name not in have:  # work tables' columns (not dbworker_paused's)
            _add_column(conn, table, table.c[name])
            if name in FILLED_FROM:  # same transaction on PostgreSQL and SQLite
                _fill(conn, table, name, FILLED_FROM[name])
            return f"added column {table.name}.{name}"
    present = _indexes(conn, table)
    for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
        if tuple(c.name for c in index.columns) not in present:
            index.create(conn)
            return f"added index {index.name}"
    if _is_work_table(table) and not _cascades(conn, table):
        _add_cascade(conn, table)
        return f"added ON DELETE CASCADE on {table.name}"
    return None


def _is_work_table(table: sa.Table) -> bool:
    return "dbworker_source" in table.info


def _cascades(conn: Connection, table: sa.Table) -> bool:
    """Whether deleting a source row deletes its record in work table ``table``: on SQLite
    the delete trigger (``tables.cascade_trigger_ddl``) exists, elsewhere the foreign key on
    ``source_id`` is ``ON DELETE CASCADE``."""
    if conn.dialect.name == "sqlite":
        name = tables.cascade_trigger_name(table.name)
        found = conn.execute(
            sa.text("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = :name"), {"name": name}
        ).first()
        return found is not None
    return any(
        str((fk.get("options") or {}).get("ondelete") or "").upper() == "CASCADE"
        for fk in _source_keys(conn, table)
    )


def _source_keys(conn: Connection, table: sa.Table) -> list[Any]:
    return [
        fk for fk in sa.inspect(conn).get_foreign_keys(table.name, schema=table.schema)
        if list(fk["constrained_columns"]) == ["source_id"]
    ]  # fmt: skip


def _add_cascade(conn: Connection, table: sa.Table) -> None:
    """Make deletes of source rows take ``table``'s records with them (a 0.0.1 or 0.1.0 table).

    SQLite cannot alter a foreign key: it gets the delete trigger, which fresh tables have too.
    PostgreSQL replaces the key in one ``ALTER TABLE`` (atomic, in the step's transaction);
    MySQL/MariaDB drops it and adds it again in two (their DDL commits by itself; a step
    interrupted between them finds no key and adds it).
    """
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(tables.cascade_trigger_ddl(table))
        return
    prep = conn.dialect.identifier_preparer
    key = next(iter(table.c.source_id.foreign_keys)).column
    names = [str(fk["name"]) for fk in _source_keys(conn, table) if fk.get("name")]
    target = f"{prep.format_table(table)}"
    constraint = f"CONSTRAINT {prep.quote(names[0])} " if names else ""
    add = (
        f"ADD {constraint}FOREIGN KEY (source_id) REFERENCES {prep.format_table(key.table)} "
        f"({prep.quote(key.name)}) ON DELETE CASCADE"
    )
    if conn.dialect.name == "postgresql":
        drops = "".join(f"DROP CONSTRAINT {prep.quote(n)}, " for n in names)
        conn.exec_driver_sql(f"ALTER TABLE {target} {drops}{add}")
        return
    for name in names:
        conn.exec_driver_sql(f"ALTER TABLE {target} DROP FOREIGN KEY {prep.quote(name)}")
    conn.exec_driver_sql(f"ALTER TABLE {target} {add}")


def ensure(engine: Engine, tables: Iterable[sa.Table]) -> list[str]:
    """Create or upgrade ``tables``; return the changes made (empty when all was current).

    The steps, in order: 1. create the work tables that do not exist (with every column and
    index of the current layout); 2. add the columns a table lacks (``tables.ADDED_COLUMNS``:
    0.2.0's lifecycle columns); 3. add the indexes it lacks (0.1.0's ``execution_status``
    index on tables created by 0.0.1, 0.2.0's ``not_before`` index); 4. make deletes of
    source rows take the work records with them (``ON DELETE CASCADE``, on SQLite a trigger).

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
        return (
            set(added_columns(table)) <= _columns(conn, table)
            and all(tuple(c.name for c in ix.columns) in present for ix in table.indexes)
            and (not _is_work_table(table) or _cascades(conn, table))
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
            absent = [name for name in added_columns(table) if name not in have]
            if absent:
                lacking[table.name] = absent
    return lacking


def describe_lacking(lacking: dict[str, list[str]]) -> str:
    """``lacking_columns``' answer in words: ``items_work lacks attempts, not_before; ...``."""
    return "; ".join(f"{table} lacks {', '.join(columns)}" for table, columns in sorted(lacking.items()))


def leading_columns(conn: Connection, table: sa.Table) -> set[str]:
    """The columns that an index of ``table`` (its primary key included) starts with."""
    inspector = sa.inspect(conn)
    first = {cols[0] for cols in _indexes(conn, table) if cols}
    primary = inspector.get_pk_constraint(table.name, schema=table.schema).get("constrained_columns") or []
    return first | {str(primary[0])} if primary else first


def missing(engine: Engine, tables: Iterable[sa.Table]) -> list[str]:
    """The names of ``tables`` that do not exist in the database yet (one schema inspection)."""
    inspector = sa.inspect(engine)
    return [t.name for t in tables if not inspector.has_table(t.name, schema=t.schema)]


def wakeup_triggers(engine: Engine, tables: Iterable[sa.Table], *, install: bool) -> list[str]:
    """Install (or, ``install=False``, remove) the wake-up triggers on each source table,
    under the schema lock; return what was done (empty when all was already so).

    PostgreSQL: the NOTIFY triggers (``notify``). Elsewhere: the change table and its row
    triggers (``changes``). Both look before they change anything.
    """
    from dbworker.sql import changes, notify

    unique = list({id(t): t for t in tables}.values())
    postgres = engine.dialect.name == "postgresql"
    created = ensure(engine, [changes.TABLE]) if install and not postgres else []
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with engine.connect() as conn, _schema_lock(conn):
                _step_lock(conn)  # one transaction: look, install or remove, commit
                if postgres:
                    done = notify.install_triggers(conn, unique) if install else notify.drop_triggers(conn, unique)
                elif install:
                    done = changes.install_triggers(conn, unique)
                else:
                    done = changes.drop_triggers(conn, unique)
            break
        except sa.exc.DBAPIError:
            # SQLite has no lock to take: a process that lost the race to create a trigger
            # ("already exists") looks again and finds it current.
            if attempt == _ATTEMPTS:
                raise
            time.sleep(min(0.05 * attempt, 1.0))
    for change in done:
        log.info("dbworker schema: %s", change)
    return created + done
