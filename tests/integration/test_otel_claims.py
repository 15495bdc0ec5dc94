"""The coordinator's claim span of each item: its parent and attempt, read with the claim (issue 31).

In-process, with a tracer of the test's own: rows written in a request span, claimed as the
claim loop claims them (``claims.claim`` with ``ItemSpans.folds``), then their spans started
(``ItemSpans.start``). On PostgreSQL the claim statement itself reads each item's attempt
count and writer's context, and starting the spans runs no statement; elsewhere one read does.
Either way each claim span is the child of the span its row was written in (or, for a row
written with no span, of its first claim span, from the second attempt on).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.orm import Session, sessionmaker

import dbworker.otel
from dbworker import Coordinator
from dbworker.engine.spans import ItemSpans
from dbworker.sql import claims, dialects, items, traces
from tests.apps import basic
from tests.conftest import Database


@pytest.fixture
def exported() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def _statements(engine: sa.Engine) -> list[str]:
    """The SQL ``engine`` runs from now on (until the test ends)."""
    ran: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: ran.append(sql))
    return ran


def _claim_spans(exporter: InMemorySpanExporter) -> dict[int, Any]:
    """The ended claim spans by item key."""
    return {int(str(s.attributes["dbworker.key"])): s for s in exporter.get_finished_spans()
            if s.name == "claim items" and s.attributes is not None}  # fmt: skip


def _round(c: Coordinator, spans: ItemSpans, *, keys: list[Any] | None = None) -> tuple[list[items.Claim], bool]:
    """One claim round as the claim loop runs it, and whether its statement read for the spans."""
    w = c.registrations()[0]
    with dialects.connect(c.engine) as conn:
        traced = spans.folds(conn)
        taken = claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=10, lease_seconds=30,
                             keys=keys, traced=traced).taken  # fmt: skip
    return taken, traced


def test_each_claim_span_is_the_child_of_its_rows_writer_read_with_the_claim(
    db: Database, exported: tuple[Any, InMemorySpanExporter]
) -> None:
    tracer, exporter = exported
    c = basic.build(db.url)
    factory: sessionmaker[Session] = sessionmaker(db.engine)
    dbworker.otel.instrument(factory)
    requests = []
    written: list[int] = []
    for name in ("POST /a", "POST /b"):  # two requests: each item's parent is its own writer's
        with tracer.start_as_current_span(name) as request, factory() as s:
            row = basic.Item(action="finish")
            s.add(row)
            s.commit()
            written.append(row.id)
            requests.append(request.get_span_context())
    [alone] = basic.add_items(db.engine, ["finish"])  # no span: no writer's context
    spans = ItemSpans(tracer, c.registrations()[0], c.engine)
    postgres = db.engine.dialect.name == "postgresql"

    taken, traced = _round(c, spans)
    assert traced is postgres  # one statement claims, and reads for the spans too, on PostgreSQL only
    assert [t.source_id for t in taken] == [*written, alone]
    if postgres:
        assert [t.attempt for t in taken] == [1, 1, 1]
        assert [t.parent is not None for t in taken] == [True, True, False]
    ran = _statements(c.engine)
    out, first = spans.start(taken)
    assert len(ran) == (0 if postgres else 1), ran  # no read of its own after a claim that read
    assert [f[0] for f in first] == [alone]
    spans._keep_first(first)
    for claim in out:
        spans.end(claim.token, "unfinished")
    claimed = _claim_spans(exporter)
    for key, request in zip(written, requests, strict=True):
        span = claimed[key]
        assert span.parent is not None and span.parent.span_id == request.span_id
        assert span.context.trace_id == request.trace_id and span.attributes["dbworker.attempt"] == 1
    assert claimed[alone].parent is None
    first_of_alone = claimed[alone].context

    # The second attempts, by key (a wake-up's or our own given-back items' round): the same
    # parents, the stored first claim span for the row written with no span; attempt 2.
    with dialects.connect(c.engine) as conn:
        for claim in out:
            assert items.give_back(conn, c.registrations()[0].table, claim)
    exporter.clear()
    keys = [str(k) if postgres else k for k in [*written, alone]]  # as claims.claim takes them
    again, traced = _round(c, spans, keys=keys)
    assert traced is postgres and sorted(t.source_id for t in again) == sorted([*written, alone])
    ran.clear()
    out, first = spans.start(again)
    assert len(ran) == (0 if postgres else 1), ran
    assert first == []
    for claim in out:
        spans.end(claim.token, "finished")
    claimed = _claim_spans(exporter)
    for key, request in zip(written, requests, strict=True):
        span = claimed[key]
        assert span.parent is not None and span.parent.span_id == request.span_id
        assert span.attributes["dbworker.attempt"] == 2
    parent = claimed[alone].parent
    assert parent is not None and parent.span_id == first_of_alone.span_id
    assert claimed[alone].context.trace_id == first_of_alone.trace_id
    assert claimed[alone].attributes["dbworker.attempt"] == 2


def test_without_the_trace_table_claims_do_not_read_it_and_spans_have_no_writers_parent(
    db: Database, exported: tuple[Any, InMemorySpanExporter]
) -> None:
    tracer, exporter = exported
    c = basic.build(db.url)
    [key] = basic.add_items(db.engine, ["finish"])
    with db.engine.begin() as conn:  # a database not migrated to the trace table
        conn.execute(sa.text(f"DROP TABLE {traces.table_name('items')}"))
    spans = ItemSpans(tracer, c.registrations()[0], c.engine)
    taken, traced = _round(c, spans)
    assert not traced and [t.source_id for t in taken] == [key] and taken[0].attempt is None
    out, first = spans.start(taken)
    spans._keep_first(first)  # nowhere to store it: nothing happens
    spans.end(out[0].token, "finished")
    span = _claim_spans(exporter)[key]
    assert span.parent is None and span.attributes is not None and span.attributes["dbworker.key"] == str(key)


def test_a_trace_table_dropped_under_a_running_pod_costs_its_claims_one_failed_round(
    db: Database, exported: tuple[Any, InMemorySpanExporter]
) -> None:
    tracer, _ = exported
    c = basic.build(db.url)
    first, second = basic.add_items(db.engine, ["finish", "finish"])
    spans = ItemSpans(tracer, c.registrations()[0], c.engine)
    taken, folded = _round(c, spans, keys=[first])
    assert [t.source_id for t in taken] == [first]
    with db.engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {traces.table_name('items')}"))
    if folded:  # the claim statement read the table: it fails once, then claims without it
        with pytest.raises(sa.exc.DBAPIError):
            _round(c, spans, keys=[second])
        spans.claim_failed()  # what the claim loop does when a claim fails
    taken, folded = _round(c, spans, keys=[second])
    assert not folded and [t.source_id for t in taken] == [second]
