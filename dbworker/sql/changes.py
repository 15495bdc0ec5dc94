"""The change table: wake-ups where the server has no NOTIFY (MySQL/MariaDB, SQLite).

``dbworker_changes`` holds the payloads PostgreSQL sends on its channel (``notify`` says
what they mean), one row each: row triggers on every source table append
``rows:<table> ["<key>"]`` for each inserted or updated row, and coordinators append
``again:`` and ``done:`` payloads. Readers (``wakeups.changes``) follow the ids; rows older
than a minute are pruned. Its triggers are row triggers: MySQL has no statement triggers,
and SQLite's cannot see the statement's rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects

TABLE_NAME = "dbworker_changes"
metadata = sa.MetaData()
TABLE = sa.Table(
    TABLE_NAME,
    metadata,
    # SQLite only autoincrements an INTEGER PRIMARY KEY.
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("payload", sa.Text(), nullable=False),
)
_TRIGGER_PREFIX = "dbworker_changes_"
_NAME_MAX = 64  # MySQL's identifier limit


def trigger_names(table: sa.Table) -> tuple[str, str]:
    """The names of ``table``'s insert and update triggers (hashed when the table's is long)."""
    base = table.name if len(table.name) <= _NAME_MAX - len(_TRIGGER_PREFIX) - 4 else hashlib.sha1(
        table.name.encode()).hexdigest()[:16]  # fmt: skip
    return f"{_TRIGGER_PREFIX}{base}_ins", f"{_TRIGGER_PREFIX}{base}_upd"


def trigger_statements(conn: Connection, table: sa.Table) -> list[tuple[str, str, str]]:
    """``(trigger name, body, CREATE statement)`` for ``table``'s two row triggers.

    Text, not SQLAlchemy constructs (Core has none for triggers): identifiers go through
    the dialect's preparer; the only string literal is the payload's prefix, whose table
    name may not hold a quote or a backslash (``ValueError``).
    """
    prep = conn.dialect.identifier_preparer
    [key] = list(table.primary_key.columns)
    if any(ch in table.name for ch in "'\\"):
        raise ValueError(f"table {table.name!r}: a name with a quote or backslash cannot have the wake-up trigger")
    prefix = f"'rows:{table.name} '"
    column = f"NEW.{prep.quote(key.name)}"
    changes = prep.quote(TABLE_NAME)
    embedded = dialects.of(conn).embedded
    out = []
    for name, event in zip(trigger_names(table), ("INSERT", "UPDATE"), strict=True):
        if embedded:
            body = (f"INSERT INTO {changes} (payload) VALUES "
                    f"({prefix} || json_array(CAST({column} AS TEXT)))")  # fmt: skip
            create = (f"CREATE TRIGGER {prep.quote(name)} AFTER {event} ON {prep.format_table(table)} "
                      f"FOR EACH ROW BEGIN {body}; END")  # fmt: skip
        else:
            body = (f"INSERT INTO {changes} (payload) VALUES "
                    f"(CONCAT({prefix}, JSON_ARRAY(CAST({column} AS CHAR))))")  # fmt: skip
            create = (f"CREATE TRIGGER {prep.quote(name)} AFTER {event} ON {prep.format_table(table)} "
                      f"FOR EACH ROW {body}")  # fmt: skip
        out.append((name, body, create))
    return out


def existing_triggers(conn: Connection) -> dict[str, str]:
    """dbworker's change triggers in the connection's database: name -> definition text."""
    if dialects.of(conn).embedded:
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'dbworker_changes_%'"
        ).all()
    else:
        rows = conn.exec_driver_sql(
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE 'dbworker\\_changes\\_%%'"
        ).all()
    return {str(name): str(sql or "") for name, sql in rows}


def install_triggers(conn: Connection, tables: Iterable[sa.Table]) -> list[str]:
    """Create or replace the change triggers on each source table; return what was done.

    Looks first: a trigger whose definition holds the current body is left alone, so a
    start or ``migrate`` that finds them in place takes no lock on the application's table.
    """
    have = existing_triggers(conn)
    prep = conn.dialect.identifier_preparer
    done = []
    for table in tables:
        changed = False
        for name, body, create in trigger_statements(conn, table):
            if body in have.get(name, ""):
                continue
            if name in have:
                conn.exec_driver_sql(f"DROP TRIGGER {prep.quote(name)}")
            conn.exec_driver_sql(create)
            changed = True
        conn.commit()
        if changed:
            done.append(f"wake-up triggers on {table.name}")
    return done


def drop_triggers(conn: Connection, tables: Iterable[sa.Table]) -> list[str]:
    """Remove the change triggers from each source table (the opt-out); return what was done."""
    have = existing_triggers(conn)
    prep = conn.dialect.identifier_preparer
    done = []
    for table in tables:
        names = [n for n in trigger_names(table) if n in have]
        for name in names:
            conn.exec_driver_sql(f"DROP TRIGGER {prep.quote(name)}")
        conn.commit()
        if names:
            done.append(f"removed wake-up triggers on {table.name}")
    return done


def has_triggers(conn: Connection, table: sa.Table) -> bool:
    """Whether both of ``table``'s change triggers exist."""
    have = existing_triggers(conn)
    return all(name in have for name in trigger_names(table))


# --- reading and writing ----------------------------------------------------------------


def top(conn: Connection) -> int:
    """The highest id written so far (0 for an empty table)."""
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(TABLE.c.id), 0))).scalar_one())


def missing_below(conn: Connection, top: int, span: int) -> list[int]:
    """The ids of the ``span`` below ``top`` that are not there: pruned, rolled back, or
    held by transactions that may still commit."""
    low = max(top - span, 0)
    ids = set(conn.execute(sa.select(TABLE.c.id).where(TABLE.c.id > low, TABLE.c.id < top)).scalars())
    return [i for i in range(low + 1, top) if i not in ids]


def read(conn: Connection, after: int, gaps: Sequence[int], limit: int) -> list[tuple[int, str]]:
    """``(id, payload)`` rows past ``after``, and those of ``gaps`` (ids below it not seen yet)."""
    c = TABLE.c
    where = c.id > after
    if gaps:
        where = sa.or_(where, c.id.in_(list(gaps)))
    query = sa.select(c.id, c.payload).where(where).order_by(c.id).limit(limit)
    return [(int(i), str(p)) for i, p in conn.execute(query)]


def write(conn: Connection, payloads: Iterable[str]) -> None:
    """Append ``payloads`` with ``conn``'s transaction (the caller commits)."""
    rows = [{"payload": p} for p in payloads]
    if rows:
        conn.execute(sa.insert(TABLE), rows)


def prune(conn: Connection, upto: int) -> int:
    """Delete rows with ids up to ``upto``, all but the newest; return how many went. Commits.

    The newest row stays so ids never start over: SQLite gives an emptied table's next row
    id 1 (as MySQL before 8.0 does after a restart), which readers past it would never see.
    """
    upto = min(upto, top(conn) - 1)
    n = conn.execute(sa.delete(TABLE).where(TABLE.c.id <= upto)).rowcount
    conn.commit()
    return int(n or 0)
