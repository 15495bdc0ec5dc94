"""``dbworker.otel.instrument``: what an application's writes leave in the trace table (issue 31).

In-process, with a tracer of the test's own (no global provider is set): the context of the
span current at the flush is stored per written row, in the write's transaction, replaced
by a later write, absent without a span, gone with the row.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from sqlalchemy.orm import Session, sessionmaker

import dbworker.otel
from dbworker import tracing
from dbworker.sql import traces
from tests.apps import basic
from tests.conftest import Database

TRACER = TracerProvider().get_tracer("test")


def _stored(db: Database) -> dict[int, str]:
    table = traces.side_table(basic.Item.__table__)  # type: ignore[arg-type]
    with db.engine.connect() as conn:
        return {int(k): str(v) for k, v in conn.execute(sa.select(table.c.source_id, table.c.traceparent))}


def test_writes_in_a_span_leave_its_context_per_row_until_the_row_goes(db: Database) -> None:
    basic.build(db.url)
    factory: sessionmaker[Session] = sessionmaker(db.engine)
    dbworker.otel.instrument(factory)
    with TRACER.start_as_current_span("POST /items"):
        first = tracing.current_traceparent()
        with factory() as s:
            rows = [basic.Item(action="finish") for _ in range(3)]
            s.add_all(rows)
            s.add(basic.Output(item_id=0, run=0, pid=0))  # a table no worker reads: nothing stored
            s.commit()
            ids = [r.id for r in rows]
    assert _stored(db) == dict.fromkeys(ids, first)

    with TRACER.start_as_current_span("PATCH /items/1"):
        second = tracing.current_traceparent()
        with factory() as s:
            item: Any = s.get(basic.Item, ids[0])
            item.priority = 5
            s.add(basic.Item(action="rolled back"))
            s.flush()
            s.commit()
        with factory() as s:
            s.add(basic.Item(action="never"))
            s.flush()
            s.rollback()  # the trace row goes with the write
    assert second != first
    stored = _stored(db)
    assert stored[ids[0]] == second and stored[ids[1]] == stored[ids[2]] == first and len(stored) == 4

    with factory() as s:  # no span: nothing carried
        s.add(basic.Item(action="untraced"))
        s.commit()
    assert len(_stored(db)) == 4

    with factory() as s:
        s.execute(sa.delete(basic.Item).where(basic.Item.id == ids[1]))
        s.commit()
    assert ids[1] not in _stored(db)  # ON DELETE CASCADE (SQLite: the delete trigger)


def test_an_engine_instrumented_carries_for_every_session_bound_to_it(db: Database) -> None:
    basic.build(db.url)
    engine = sa.create_engine(db.url)
    dbworker.otel.instrument(engine)
    with TRACER.start_as_current_span("job"):
        header = tracing.current_traceparent()
        with Session(engine) as s:
            item = basic.Item(action="finish")
            s.add(item)
            s.commit()
            key = item.id
        with Session(db.engine) as s:  # another engine, not instrumented
            other = basic.Item(action="finish")
            s.add(other)
            s.commit()
            untraced = other.id
    engine.dispose()
    stored = _stored(db)
    assert stored.get(key) == header and untraced not in stored
