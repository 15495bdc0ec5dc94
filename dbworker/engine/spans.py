"""The coordinator's span of each claimed item, from its claim to its recorded outcome.

Started when a claim hands items out: each item's ``traceparent`` of the write that made it,
from the source's trace table (``sql.traces``; the span becomes its child: request and
handler in one trace), and its attempt count. A claim in one statement (PostgreSQL, ``folds``)
reads both itself; after other claims, one read of the work and trace tables does.
The span's own ``traceparent`` goes with the claim to the handler process, whose span is its
child. Ended by the recorder with the outcome; lease loss, give-backs, recalls and timeouts
are events on it. A span of an earlier attempt of the same item claimed here is linked. An
item with no writer's context gets its first claim span's stored instead (``_keep_first``),
so every later attempt, on any pod, is in that attempt's trace.
Only built when tracing is on (``tracing.tracer()``); otherwise none of this runs.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dbworker import tracing
from dbworker.sql import claimer, dialects, traces
from dbworker.sql.items import Claim
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")

_REMEMBERED = 10_000  # earlier attempts' span contexts kept for links, per worker


class ItemSpans:
    """The open spans of one worker's claimed items, by claim token (any thread)."""

    def __init__(self, tracer: Any, worker: RegisteredWorker, engine: Engine) -> None:
        self._tracer = tracer
        self._worker = worker
        self._engine = engine
        self._source = worker.key.table
        self._traces = traces.side_table(self._source)
        self._pod = claimer.identity()
        self._open: dict[str, Any] = {}
        self._earlier: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._readable = True  # False once the trace table was found missing (not migrated)
        self._folds: bool | None = None  # decided at the first claim (``folds``)
        self._name = f"claim {worker.name}"
        # Built once: the read runs per claim batch (a new select would cost its construction
        # and cache key each time); the keys are one expanding parameter.
        work = worker.table
        keys: sa.BindParameter[Any] = sa.bindparam("dbw_keys", expanding=True)
        self._read_both = (
            sa.select(work.c.source_id, work.c.attempts, self._traces.c.traceparent)
            .select_from(work.outerjoin(self._traces, self._traces.c.source_id == work.c.source_id))
            .where(work.c.source_id.in_(keys))
        )
        self._read_attempts = sa.select(work.c.source_id, work.c.attempts, sa.null()).where(work.c.source_id.in_(keys))

    def folds(self, conn: Connection) -> bool:
        """Whether claims on ``conn`` read the items' attempt counts and writers' contexts in
        their own statement (``claims.claim``'s ``traced``): where the server claims in one
        statement and the trace table exists; decided once, at the first claim."""
        if self._folds is None:
            try:
                self._folds = dialects.of(conn).one_statement_claims and self._has_table()
            except sa.exc.DBAPIError:
                return False  # decided at the next claim
        return self._folds

    def claim_failed(self) -> None:
        """A claim failed: whether claims read the trace table is decided again at the next
        one, so a trace table dropped under a running pod costs its claims one failed round."""
        self._folds = None

    def _has_table(self) -> bool:
        """Whether the trace table exists (on a connection of its own: a claim's must not be
        left in a transaction); raises DBAPIError."""
        side = self._traces
        self._readable = sa.inspect(self._engine).has_table(side.name, schema=side.schema)
        return self._readable

    def started(self, hand_out: Callable[[list[Claim]], None], claimed: list[Claim]) -> None:
        """``hand_out`` the claims with their spans (``start``), then store the first claim
        spans of those that need it (``_keep_first``): after the items went to their
        processes, so that the write adds nothing to their pick-up."""
        out, first = self.start(claimed)
        hand_out(out)
        self._keep_first(first)

    def start(self, claimed: list[Claim]) -> tuple[list[Claim], list[tuple[Any, str]]]:
        """Open a span per claim: the claims with its ``traceparent``, and the (key,
        traceparent) of those whose item has no stored context (for ``_keep_first``)."""
        if not claimed:
            return claimed, []
        unread = [c.source_id for c in claimed if c.attempt is None]  # not read by their claim (``folds``)
        producers, attempts = self._read(unread) if unread else ({}, {})
        for c in claimed:
            if c.attempt is not None:
                attempts[c.source_id] = c.attempt
                if c.parent:
                    producers[c.source_id] = c.parent
        with self._lock:
            earlier = [self._earlier.get(c.source_id) for c in claimed]
        out: list[Claim] = []
        first: list[tuple[Any, str]] = []
        spans = []
        kind = tracing.consumer()
        for claim, before in zip(claimed, earlier, strict=True):
            attrs = tracing.item_attributes(self._worker.name, self._source.name, claim.source_id,
                                            operation="receive", pod=self._pod)  # fmt: skip
            if claim.source_id in attempts:
                attrs[tracing.ATTEMPT] = attempts[claim.source_id]
            if claim.taken_over:
                attrs["dbworker.taken_over"] = True
            span = self._tracer.start_span(self._name, context=tracing.parent_context(producers.get(claim.source_id)),
                                           links=None if before is None else [tracing.link(before)], kind=kind,
                                           attributes=attrs)  # fmt: skip
            spans.append(span)
            header = tracing.traceparent(span)
            if claim.source_id not in producers and header is not None and span.is_recording():
                first.append((claim.source_id, header))
            out.append(dataclasses.replace(claim, trace=header))
        with self._lock:
            for claim, span in zip(claimed, spans, strict=True):
                self._open[claim.token] = span
                self._earlier[claim.source_id] = span.get_span_context()
                self._earlier.move_to_end(claim.source_id)
            while len(self._earlier) > _REMEMBERED:
                self._earlier.popitem(last=False)
        return out, first

    def _keep_first(self, first: list[tuple[Any, str]]) -> None:
        """Store the claim span of attempts whose item had no stored context (rows written
        with no span, or by another program) in the trace table, unless a writer's context
        got there first: the item's later attempts, claimed by any pod, even after a restart,
        are then its children, in one trace. One short write per claim batch, only for such
        items and only while tracing records; a failure costs that link only."""
        if not first or not self._readable:
            return
        try:
            with dialects.connect(self._engine) as conn:
                traces.keep_first(conn, self._traces, first)
                conn.commit()
        except sa.exc.DBAPIError as exc:  # a source row deleted meanwhile, the trace table missing
            log.debug("dbworker: attempts' trace context not stored (%s)", type(exc).__name__)

    def _read(self, keys: list[Any]) -> tuple[dict[Any, str], dict[Any, int]]:
        """The writers' traceparents and the items' attempt counts, in one read."""
        query = self._read_both if self._readable else self._read_attempts
        try:
            with dialects.connect_reads(self._engine) as conn, conn.begin():
                rows = conn.execute(query, {"dbw_keys": keys}).all()
        except sa.exc.DBAPIError:
            try:  # no trace table (not migrated): spans without the writer's parent from now on
                self._has_table()
            except sa.exc.DBAPIError:
                pass
            return {}, {}
        return {r[0]: r[2] for r in rows if r[2]}, {r[0]: int(r[1]) for r in rows}

    def event(self, token: str, name: str, **attrs: Any) -> None:
        with self._lock:
            span = self._open.get(token)
        if span is not None:
            span.add_event(name, attributes=attrs or None)

    @contextlib.contextmanager
    def ending(self, token: str, outcome: str, error: str | None = None, *,
               event: str | None = None) -> Iterator[None]:  # fmt: skip
        """End ``token``'s span with ``outcome`` (and ``event``), current meanwhile (log records
        written inside carry its ids). Nothing when it already ended."""
        with self._lock:
            span = self._open.pop(token, None)
        if span is None:
            yield
            return
        if event is not None:
            span.add_event(event)
        tracing.set_outcome(span, outcome, error)
        try:
            with tracing.use(span):
                yield
        finally:
            span.end()

    def end(self, token: str, outcome: str, error: str | None = None, *, event: str | None = None) -> None:
        with self.ending(token, outcome, error, event=event):
            pass

    def end_all(self, outcome: str) -> None:
        """End what is still open (the loop ended)."""
        with self._lock:
            tokens = list(self._open)
        for token in tokens:
            self.end(token, outcome)


def for_worker(worker: RegisteredWorker, engine: Engine) -> ItemSpans | None:
    """The worker's item spans when tracing is on in this process, else None."""
    tracer = tracing.tracer()
    return None if tracer is None else ItemSpans(tracer, worker, engine)
