"""Two processes of a traced application, for the OpenTelemetry tests (run with ``python -m``).

``produce URL ACTION...``: the "API": sets its own tracer provider (OTLP over HTTP, endpoint
from the environment), instruments its engine with ``dbworker.otel.instrument`` and writes
one ``items`` row per action inside a request span; the last action's row is written with a
Core insert (its context cannot travel). Prints JSON: the ids, the request span's ids.
``consume URL LOGFILE TIMEOUT RETRIES ID...``: the "pod": the basic app's coordinator, tracing configured the
standard way (the ``OTEL_*`` environment), JSON logs to LOGFILE; stops once every item ended.
``consume-async ...``: the same with the ``asyncapp`` coordinator (an ``async def`` handler).
``consume-first URL LOGFILE ID...``: the basic app's coordinator, retrying after 4 s; stops
once each item's first attempt ended (its next attempt is left to another process).
"""

from __future__ import annotations

import json
import sys
import time

import sqlalchemy as sa
from sqlalchemy.orm import Session

import dbworker.otel
from dbworker import ExecutionStatus, Retry, logs
from tests.apps import asyncapp, basic


def produce(url: str, actions: list[str]) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "api"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    engine = sa.create_engine(url)
    dbworker.otel.instrument(engine)
    *orm_actions, core_action = actions
    with trace.get_tracer("api").start_as_current_span("POST /items", kind=trace.SpanKind.SERVER) as span:
        with Session(engine) as session:
            rows = [basic.Item(action=a) for a in orm_actions]
            session.add_all(rows)
            session.commit()
            ids = [r.id for r in rows]
        with engine.begin() as conn:
            core = conn.execute(sa.insert(basic.Item).values(action=core_action)).inserted_primary_key
            ids.append(core[0])
        ctx = span.get_span_context()
    provider.shutdown()
    print(json.dumps({"ids": ids, "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}))


def consume(url: str, logfile: str, timeout: float | None, retries: int, ids: list[int], *,
            asynchronous: bool = False) -> None:  # fmt: skip
    """``timeout``: the worker's (0: none); ``retries``: attempts its Retry allows (0: no Retry).
    Items whose action is ``dbwait`` are cancelled once their handler started (lease lost)."""
    with open(logfile, "w") as stream:
        logs.setup(fmt="json", stream=stream)
        retry = Retry(max_attempts=retries, delay=0.05, backoff=1.0) if retries else None
        build = asyncapp.build if asynchronous else basic.build
        coordinator = build(url, poll_seconds=0.05, max_poll_seconds=0.5, lease_seconds=3, retry=retry,
                                  timeout=timeout or None)  # fmt: skip
        coordinator.start()
        with Session(coordinator.engine) as s:
            waiting = set(s.scalars(sa.select(basic.Item.id).where(basic.Item.id.in_(ids),
                                                                   basic.Item.action == "dbwait")))  # fmt: skip
        deadline = time.monotonic() + 120
        done = (ExecutionStatus.FINISHED, ExecutionStatus.FAILED)
        while time.monotonic() < deadline:
            with Session(coordinator.engine) as s:
                started = set(s.scalars(sa.select(basic.Started.item_id).where(basic.Started.item_id.in_(waiting))))
                for key in started:
                    coordinator.workers["items"].cancel(s, key)
                    waiting.discard(key)
                s.commit()
                statuses = [coordinator.execution_status(s, worker="items", source_id=i) for i in ids]
            if all(st in done for st in statuses) and not waiting:
                break
            time.sleep(0.05)
        coordinator.stop(timeout=30)


def consume_first(url: str, logfile: str, ids: list[int]) -> None:
    with open(logfile, "w") as stream:
        logs.setup(fmt="json", stream=stream)
        coordinator = basic.build(url, poll_seconds=0.05, max_poll_seconds=0.5, lease_seconds=3,
                                  retry=Retry(max_attempts=3, delay=4.0, backoff=1.0))  # fmt: skip
        coordinator.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with Session(coordinator.engine) as s:
                states = [coordinator.workers["items"].state(s, i) for i in ids]
            if all(st is not None and st["history"] and st["execution_status"] is not ExecutionStatus.WORKING
                   for st in states):  # fmt: skip
                break
            time.sleep(0.05)
        coordinator.stop(timeout=30)


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "produce":
        produce(url, rest)
    elif command == "consume-first":
        consume_first(url, rest[0], [int(i) for i in rest[1:]])
    else:
        consume(url, rest[0], float(rest[1]), int(rest[2]), [int(i) for i in rest[3:]],
                asynchronous=command == "consume-async")  # fmt: skip
