"""OpenTelemetry for applications: ``instrument(engine)`` carries the writer's trace to the handler.

The application calls ``dbworker.otel.instrument(engine)`` (or passes the ``sessionmaker`` it
writes with) once at start-up. From then on, when an ORM flush on it inserts or updates rows
of a table that a dbworker worker reads (one whose trace table, ``dbworker_traces_<table>``,
``migrate`` created) while a span is current, the span's W3C ``traceparent`` is written for
each of those rows into that trace table, in the same transaction: it commits or rolls back
with the write. The coordinator that claims a row reads it and makes the item's spans
children of the writer's, so the request and the handler that ran for its row are one trace.

Cost per flush: no current span (tracing off), one ``get_current_span()`` call; a span, one
upsert statement per table written (all its rows in one ``executemany``), and once per table
and process a look whether the trace table exists. Not carried (the item's spans then start
a trace of their own): rows written by other programs, Core statements
(``session.execute(insert(...))``, ``update().where(...)``, bulk ``executemany``) and raw SQL,
since only the ORM's flush names the rows it writes.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from dbworker import tracing
from dbworker.sql import traces

__all__ = ["instrument"]

_RECHECK_SECONDS = 60.0  # a table without a trace table is looked at again after this
_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
_lock = threading.Lock()
# By engine, weakly: an id() outlives its engine, and a new engine at that address (another
# database) must not get the old one's answer.
_known: weakref.WeakKeyDictionary[Engine, dict[str, tuple[sa.Table | None, float]]] = weakref.WeakKeyDictionary()


def instrument(target: Engine | sessionmaker[Any]) -> None:
    """Carry the current span's context with the rows written through ``target`` (idempotent).

    ``target``: the SQLAlchemy ``Engine`` the application writes with (every ``Session``
    bound to it), or a ``sessionmaker`` (its sessions only). ``RuntimeError`` when
    OpenTelemetry is not installed (``pip install 'dbworker[otel]'``); ``TypeError`` for
    anything else than an engine or a sessionmaker.
    """
    if not tracing.available():
        raise RuntimeError("dbworker.otel.instrument() needs OpenTelemetry: pip install 'dbworker[otel]'")
    sync = getattr(target, "sync_engine", None)  # an AsyncEngine: its sync engine runs the flush
    if isinstance(sync, Engine):
        target = sync
    if isinstance(target, Engine):
        _engines.add(target)
        if not event.contains(Session, "after_flush", _after_flush_on_engine):
            event.listen(Session, "after_flush", _after_flush_on_engine)
    elif isinstance(target, sessionmaker):
        if not event.contains(target, "after_flush", _after_flush):
            event.listen(target, "after_flush", _after_flush)
    else:
        raise TypeError(
            f"dbworker.otel.instrument() takes the Engine or sessionmaker the application writes "
            f"with, got {type(target).__name__}"
        )


def _after_flush_on_engine(session: Session, flush_context: Any) -> None:
    bind = session.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    if engine in _engines:
        _after_flush(session, flush_context)


def _after_flush(session: Session, flush_context: Any) -> None:
    header = tracing.current_traceparent()
    if header is None:
        return  # no span: nothing to carry (the cost of tracing off)
    written = _written(session.new, session.dirty)
    if not written:
        return
    conn = session.connection()
    for table, keys in written.items():
        side = _side_table(conn, table)
        if side is not None:
            traces.write(conn, side, ((key, header) for key in keys))


def _written(new: Iterable[Any], dirty: Iterable[Any]) -> dict[sa.Table, list[Any]]:
    """The keys of the rows this flush inserted or updated, by table (single-key tables)."""
    out: dict[sa.Table, list[Any]] = {}
    for obj in (*new, *dirty):
        state = sa.inspect(obj)
        # Not state.identity: a new object's is set only after this event; its key columns are.
        identity = state.mapper.primary_key_from_instance(obj)
        if len(identity) != 1 or identity[0] is None:
            continue
        table = state.mapper.base_mapper.local_table
        if isinstance(table, sa.Table):
            out.setdefault(table, []).append(identity[0])
    return out


def _side_table(conn: Connection, table: sa.Table) -> sa.Table | None:
    """``table``'s trace table if it exists in the database (looked at once a while)."""
    key = f"{table.schema}.{table.name}"
    now = time.monotonic()
    with _lock:
        tables = _known.setdefault(conn.engine, {})
        known = tables.get(key)
    if known is not None and (known[0] is not None or now - known[1] < _RECHECK_SECONDS):
        return known[0]
    name = traces.table_name(table.name)
    exists = sa.inspect(conn).has_table(name, schema=table.schema)
    side = traces.side_table(table) if exists else None
    with _lock:
        tables[key] = (side, now)
    return side
