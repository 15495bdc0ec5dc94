"""The ``<name>_work`` table of each worker, defined in the source model's MetaData.

Keeping it in the application's MetaData lets the application's own migrations see it. The
layout is 0.0.1's plus an index on ``execution_status`` and the lifecycle columns
(``attempts``, ``not_before`` with its index, ``traceback``, ``claimed_by``,
``ended_at``, ``changed_at``); ``upgrade.py`` brings older
databases to it.

Deleting a source row takes its work records with it: the foreign key is ``ON DELETE
CASCADE``, and on SQLite, whose foreign keys are off unless each connection turns them on, an
``AFTER DELETE`` trigger on the source (``cascade_trigger_name``) does the same whatever the
connection's setting.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapper

from dbworker.sql import names

STATUS_LENGTH = 16
TOKEN_LENGTH = 36
CLAIMER_LENGTH = 255  # host:pid of the claiming process (claimer.identity)
ERROR_MAX_CHARS = 16_000  # fits MySQL's TEXT (64 KiB) even in 4-byte UTF-8


def source_mapper(source: Any) -> Mapper[Any]:
    """The mapper of ``source``; ``ValueError`` if it is not a mapped class with one key column."""
    try:
        mapper = sa.inspect(source, raiseerr=False)
    except Exception:
        mapper = None
    if not isinstance(mapper, Mapper):
        raise ValueError(f"source must be a mapped SQLAlchemy class, got {source!r}")
    if len(mapper.primary_key) != 1:
        keys = ", ".join(c.name for c in mapper.primary_key)
        raise ValueError(
            f"source {mapper.class_.__name__} must have exactly one primary-key column (has: {keys})"
        )
    return mapper


def source_key(source: Any) -> sa.Column[Any]:
    """The single primary-key column of ``source``."""
    return cast("sa.Column[Any]", source_mapper(source).primary_key[0])


def key_kind(column: sa.Column[Any]) -> type | None:
    """The Python type of a key column's values (None when its type does not say)."""
    try:
        return cast(type, column.type.python_type)
    except NotImplementedError:
        return None


def key_from_text(text: str, column: sa.Column[Any]) -> Any:
    """A key's text form (as triggers, notifications and ``dbworker_sweeps`` write it) as
    ``column``'s value: int, UUID or text; None when it is not one, or the type has no
    plain text form (a wake-up naming it then names no row)."""
    kind = key_kind(column)
    try:
        if kind is int:
            return int(text)
        if kind is uuid.UUID:
            return uuid.UUID(text)
    except ValueError:
        return None
    return text if kind is str else None


def parse_key(raw: str, source: Any) -> Any:
    """``raw`` (typed by a person) as the type of ``source``'s primary key: int, UUID or text;
    ``ValueError`` naming the expected type.
    """
    column = source_key(source)
    kind = key_kind(column)
    if kind not in (int, uuid.UUID):
        return raw
    value = key_from_text(raw, column)
    if value is None:
        what = "an integer" if kind is int else "a UUID"
        raise ValueError(f"item ID {raw!r} is not {what} (the primary key of {source.__name__})")
    return value


def table_name(worker: str) -> str:
    return f"{worker}_work"


def status_index_name(worker: str) -> str:
    return names.identifier(f"ix_{table_name(worker)}_execution_status")


# MySQL/MariaDB's DATETIME keeps whole seconds unless asked: a 0.6 s delay would end early.
MICROSECONDS = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def not_before_index_name(worker: str) -> str:
    return names.identifier(f"ix_{table_name(worker)}_not_before")


def ended_at_index_name(worker: str) -> str:
    """The overview's recent failures read ``ended_at`` through it."""
    return names.identifier(f"ix_{table_name(worker)}_ended_at")


def changed_at_index_name(worker: str) -> str:
    """The console's time filters (``since``, ``until``) read ``changed_at`` through it."""
    return names.identifier(f"ix_{table_name(worker)}_changed_at")


# Columns added after 0.0.1, in the order the upgrade adds them (each with a server default
# or nullable, so existing rows stay valid and 0.0.1 code that never writes them still works).
ADDED_COLUMNS = ("attempts", "not_before", "traceback", "claimed_by", "ended_at",
                 "progress_fraction", "progress_note", "progress_at",
                 "logs", "trace_id", "span_id",  # these three: of history tables (sql.history)
                 "changed_at")


# Added columns filled from another when the upgrade adds them (in the same step).
FILLED_FROM = {"changed_at": "ended_at"}


def added_columns(table: sa.Table) -> list[str]:
    """The ``ADDED_COLUMNS`` that belong to ``table``'s layout (a work or a history table)."""
    return [name for name in ADDED_COLUMNS if name in table.c]


PROGRESS_NOTE_CHARS = 200  # dbworker.report_progress(note=...) is cut to this


def work_table(worker: str, source: Any) -> sa.Table:
    """The work table of ``worker`` over ``source``, defined once per MetaData.

    Defining it again (another coordinator, a handler process) returns the same Table;
    a different table already using the name is a ``ValueError``.
    """
    key = source_key(source)
    metadata = cast(sa.Table, source_mapper(source).local_table).metadata
    name = table_name(worker)
    existing = metadata.tables.get(name)
    if existing is not None:
        if existing.info.get("dbworker_source") is not key.table:
            raise ValueError(
                f"table {name!r} already exists in {source.__name__}'s MetaData and is not "
                f"worker {worker!r}'s work table over {source.__name__}; choose another worker name"
            )
        return existing
    table = sa.Table(
        name,
        metadata,
        sa.Column(
            "source_id", key.type, sa.ForeignKey(key, ondelete="CASCADE"), primary_key=True, autoincrement=False
        ),
        sa.Column("execution_status", sa.String(STATUS_LENGTH), nullable=False),
        sa.Column("claim_token", sa.String(TOKEN_LENGTH), nullable=True),
        # index=True: named by the MetaData's convention (SQLAlchemy cuts a long one with a hash).
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True, index=True),
        sa.Column("error", sa.Text(), nullable=True),
        # Invocations of the current step (see sql/attempts.py); 0 before the first claim.
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        # Not claimable before (naive UTC), set only on unfinished items that wait.
        sa.Column("not_before", MICROSECONDS, nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        # host:pid of the process that made the latest claim (kept after it ends).
        sa.Column("claimed_by", sa.String(CLAIMER_LENGTH), nullable=True),
        # When the item last became FINISHED or FAILED (naive UTC, the server's clock).
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        # The latest dbworker.report_progress() of the item's handler (sql/progress.py).
        sa.Column("progress_fraction", sa.Float(), nullable=True),
        sa.Column("progress_note", sa.String(PROGRESS_NOTE_CHARS), nullable=True),
        sa.Column("progress_at", MICROSECONDS, nullable=True),
        # The item's last change: its latest claim or, later, its end (ended_at), naive UTC, the
        # server's clock; written by the same statements, so that the console's time filters
        # (since, until) read one index (docs/console.md).
        sa.Column("changed_at", sa.DateTime(), nullable=True),
        sa.Index(status_index_name(worker), "execution_status"),
        sa.Index(not_before_index_name(worker), "not_before"),
        sa.Index(ended_at_index_name(worker), "ended_at"),
        sa.Index(changed_at_index_name(worker), "changed_at"),
        info={"dbworker_source": key.table},
    )
    cascade_on_sqlite(table)
    return table


def cascade_on_sqlite(table: sa.Table) -> None:
    """On SQLite, create (drop) with ``table`` the delete trigger of ``cascade_trigger_ddl``:
    a work table, and a history table (``sql.history``) keyed the same way."""
    sa.event.listen(table, "after_create", _create_cascade_trigger)
    sa.event.listen(table, "before_drop", _drop_cascade_trigger)


def _create_cascade_trigger(table: sa.Table, conn: Connection, **_: Any) -> None:
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(cascade_trigger_ddl(table))


def _drop_cascade_trigger(table: sa.Table, conn: Connection, **_: Any) -> None:
    # A trigger left behind would fail every later DELETE on the source ("no such table").
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {_quote(cascade_trigger_name(table.name))}")


def cascade_trigger_name(work_table_name: str) -> str:
    """SQLite: the trigger on the source that deletes a deleted row's work record."""
    return f"dbworker_delete_{work_table_name}"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def cascade_trigger_ddl(table: sa.Table) -> str:
    """SQLite: ``CREATE TRIGGER`` deleting ``table``'s record of each deleted source row.

    A foreign key's ``ON DELETE CASCADE`` acts only on connections that turned foreign keys
    on (``PRAGMA foreign_keys``); this acts on every one, and on tables created before the
    cascade (SQLite cannot alter a foreign key). With both, the cascade deletes first and the
    trigger finds nothing: the key's ``NO ACTION`` check comes at the statement's end, after it.
    """
    key = next(iter(table.c.source_id.foreign_keys)).column
    return (
        f"CREATE TRIGGER IF NOT EXISTS {_quote(cascade_trigger_name(table.name))} "
        f"AFTER DELETE ON {_quote(key.table.name)} FOR EACH ROW BEGIN "
        f"DELETE FROM {_quote(table.name)} WHERE source_id = OLD.{_quote(key.name)}; END"
    )
