"""The trace side table of a source table: ``dbworker_traces_<source>``, one row per source row.

It carries the W3C ``traceparent`` of the span that last wrote a source row (written by
``dbworker.otel.instrument`` in the application's own transaction, so it commits or rolls
back with the write) to the coordinator that claims the row, which reads it with the claim's
keys and makes the item's spans children of the writer's. A row written with no span gets the
claim span of its item's first attempt instead (``keep_first``), so later attempts on any
pod join that attempt's trace. The application's table gains no
column. A source row's trace row goes with it (``ON DELETE CASCADE``; on SQLite a delete
trigger too, as for work tables). One table per source table, shared by every worker over it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection

from dbworker.sql import dialects, names, tables

TRACEPARENT_LENGTH = 55  # "00-<32 hex>-<16 hex>-<2 hex>"
PREFIX = "dbworker_traces_"


def table_name(source_table: str) -> str:
    return names.identifier(f"{PREFIX}{source_table}")


def side_table(source: sa.Table) -> sa.Table:
    """The trace table of ``source`` (in its MetaData), defined once."""
    name = table_name(source.name)
    existing = source.metadata.tables.get(name)
    if existing is not None:
        return existing
    [key] = list(source.primary_key.columns)
    table = sa.Table(
        name,
        source.metadata,
        # Named: MySQL/MariaDB would name it <table>_ibfk_1, over its 64 characters for long tables.
        sa.Column("source_id", key.type, sa.ForeignKey(key, ondelete="CASCADE", name=names.identifier(f"fk_{name}")),
                  primary_key=True, autoincrement=False),
        sa.Column("traceparent", sa.String(TRACEPARENT_LENGTH), nullable=False),
        schema=source.schema,
        info={"dbworker_traces_of": source.name},
    )
    tables.cascade_on_sqlite(table)
    return table


def write(conn: Connection, table: sa.Table, rows: Iterable[tuple[Any, str]]) -> None:
    """Upsert ``(source key, traceparent)`` pairs in ``conn``'s transaction (no commit)."""
    values = [{"source_id": key, "traceparent": tp} for key, tp in rows]
    if not values:
        return
    conn.execute(_upsert(conn.dialect.name, table), values)


def keep_first(conn: Connection, table: sa.Table, rows: Iterable[tuple[Any, str]]) -> None:
    """Insert ``(source key, traceparent)`` pairs for keys that have none (a writer's
    context stored meanwhile stays); no commit. The claim span of an item's first attempt,
    so its later attempts join its trace (``engine.spans``)."""
    values = [{"source_id": key, "traceparent": tp} for key, tp in rows]
    if values:
        conn.execute(dialects.of(conn).insert_ignoring_duplicate(table, "source_id"), values)


def _upsert(dialect: str, table: sa.Table) -> Any:
    if dialect == "postgresql":
        ins = postgresql.insert(table)
        return ins.on_conflict_do_update(index_elements=["source_id"],
                                         set_={"traceparent": ins.excluded.traceparent})  # fmt: skip
    if dialect == "sqlite":
        lite = sqlite.insert(table)
        return lite.on_conflict_do_update(index_elements=["source_id"],
                                          set_={"traceparent": lite.excluded.traceparent})  # fmt: skip
    if dialect in ("mysql", "mariadb"):
        my = mysql.insert(table)
        return my.on_duplicate_key_update(traceparent=my.inserted.traceparent)
    raise ValueError(f"dbworker.otel: no upsert for the {dialect} dialect")


def read(conn: Connection, table: sa.Table, keys: list[Any]) -> dict[Any, str]:
    """The stored traceparents of these source keys (those that have one)."""
    if not keys:
        return {}
    found = conn.execute(sa.select(table.c.source_id, table.c.traceparent).where(table.c.source_id.in_(keys)))
    return {row[0]: cast(str, row[1]) for row in found}
