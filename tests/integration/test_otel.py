"""OpenTelemetry (issue 31), through a real OTLP/HTTP receiver, across processes.

An "API" process writes rows inside a request span with ``dbworker.otel.instrument``; a pod
process (tracing from the ``OTEL_*`` environment) runs them in handler processes. The
receiver must get one trace per request: the request span, the coordinator's claim span of
each item as its child, the handler process's span as the claim's child; every attempt; the
attributes; errors recorded; the JSON logs carrying the ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps import basic
from tests.conftest import Database
from tests.helpers import wait_until
from tests.otlp import receiver

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _env(endpoint: str, service: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    path = os.pathsep.join([str(ROOT), str(ROOT / "operator"), env.get("PYTHONPATH", "")])
    return {**env, "PYTHONPATH": path, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "200"}  # fmt: skip


def _run(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "tests.apps.traced", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _of(spans: list[dict[str, Any]], name: str, key: int) -> list[dict[str, Any]]:
    found = [s for s in spans if s["name"] == name and s["attributes"].get("dbworker.key") == str(key)]
    return sorted(found, key=lambda s: s["start"])


def test_one_trace_from_the_request_to_every_attempt_of_its_handlers(db: Database, tmp_path: Path) -> None:
    basic.build(db.url)  # application, work and trace tables (migrate)
    with receiver() as (endpoint, got):
        made = json.loads(_run(["produce", db.url, "finish", "fail", "flaky:2", "unfinished:2", "finish"],
                               _env(endpoint, "api")))  # fmt: skip
        finish, fail, flaky, steps, core = made["ids"]
        logfile = tmp_path / "pod.log"
        _run(["consume", db.url, str(logfile), "0", "3", *map(str, made["ids"])], _env(endpoint, "pod"))

        def complete() -> bool:
            spans = got.all_spans()
            return (len(_of(spans, "process items", flaky)) >= 2 and len(_of(spans, "claim items", steps)) >= 2
                    and all(_of(spans, "process items", i) for i in made["ids"]))  # fmt: skip

        wait_until(complete, timeout=60, what="the spans of every item at the receiver")
        spans = got.all_spans()

    [request] = [s for s in spans if s["name"] == "POST /items"]
    assert (request["trace_id"], request["span_id"]) == (made["trace_id"], made["span_id"])
    assert request["resource"]["service.name"] == "api"

    # The finished item: request -> claim (pod) -> process (handler process), one trace.
    [claim] = _of(spans, "claim items", finish)
    [process] = _of(spans, "process items", finish)
    assert claim["trace_id"] == process["trace_id"] == request["trace_id"]
    assert claim["parent_id"] == request["span_id"] and process["parent_id"] == claim["span_id"]
    assert claim["resource"]["service.name"] == process["resource"]["service.name"] == "pod"
    for span, operation in ((claim, "receive"), (process, "process")):
        attrs = span["attributes"]
        assert attrs["messaging.system"] == "dbworker" and attrs["messaging.operation.type"] == operation
        assert attrs["messaging.destination.name"] == attrs["dbworker.worker"] == "items"
        assert attrs["dbworker.source_table"] == "items" and attrs["messaging.message.id"] == str(finish)
        assert attrs["dbworker.outcome"] == "finished" and span["status"] != 2
        assert attrs["dbworker.pod"].rpartition(":")[2].isdigit()
    assert claim["attributes"]["dbworker.attempt"] == 1
    assert claim["kind"] == process["kind"] == 5  # SPAN_KIND_CONSUMER

    # A failure, retried twice then failed: recorded on every handler span (exception event,
    # error status) and on the claims'.
    failures = _of(spans, "process items", fail)
    assert [f["attributes"]["dbworker.outcome"] for f in failures] == ["retried", "retried", "failed"]
    for failed in failures:
        [exc] = [e for e in failed["events"] if e["name"] == "exception"]
        assert failed["status"] == 2 and exc["attributes"]["exception.type"] == "RuntimeError"
        assert "asked to fail" in exc["attributes"]["exception.message"]
    failed_claim = _of(spans, "claim items", fail)[-1]
    assert failed_claim["status"] == 2 and failed_claim["trace_id"] == request["trace_id"]
    assert failed_claim["attributes"]["dbworker.attempt"] == 3

    # Retries and Unfinished steps: every attempt in the request's trace, each linked to the one before.
    for key, outcomes in ((flaky, ["retried", "finished"]), (steps, ["unfinished", "finished"])):
        claims = _of(spans, "claim items", key)
        assert [c["attributes"]["dbworker.outcome"] for c in claims] == outcomes
        assert [c["attributes"]["dbworker.attempt"] for c in claims] == ([1, 2] if key == flaky else [1, 1])
        assert all(c["trace_id"] == request["trace_id"] and c["parent_id"] == request["span_id"] for c in claims)
        assert claims[1]["links"] == [(claims[0]["trace_id"], claims[0]["span_id"])]
        processes = _of(spans, "process items", key)
        assert [p["parent_id"] for p in processes] == [c["span_id"] for c in claims]
    [retried] = [p for p in _of(spans, "process items", flaky) if p["attributes"]["dbworker.outcome"] == "retried"]
    assert retried["status"] == 2 and any(e["name"] == "dbworker.retried" for e in retried["events"])

    # A row written by a Core insert carries no context: its spans start a trace of their own.
    [alone] = _of(spans, "claim items", core)
    assert alone["parent_id"] is None and alone["trace_id"] != request["trace_id"]
    assert _of(spans, "process items", core)[0]["parent_id"] == alone["span_id"]

    # The pod's JSON log line about the failure carries the failed item's claim span.
    lines = [json.loads(line) for line in logfile.read_text().splitlines() if line.startswith("{")]
    [told] = [x for x in lines if f"handler failed for item {fail}:" in x["message"]]
    assert (told["trace_id"], told["span_id"]) == (failed_claim["trace_id"], failed_claim["span_id"])


def test_crashes_timeouts_and_lost_claims_end_the_claim_span_with_their_outcome(db: Database, tmp_path: Path) -> None:
    basic.build(db.url)
    with receiver() as (endpoint, got):
        made = json.loads(_run(["produce", db.url, "kill", "hang", "dbwait", "finish"], _env(endpoint, "api")))
        crash, hang, cancelled, _ = made["ids"]
        _run(["consume", db.url, str(tmp_path / "pod.log"), "2", "0", *map(str, made["ids"])], _env(endpoint, "pod"))

        def ended() -> bool:
            spans = got.all_spans()
            return all(_of(spans, "claim items", i) for i in (crash, hang, cancelled))

        wait_until(ended, timeout=60, what="the claim spans of the crashed, hung and cancelled items")
        spans = got.all_spans()

    [request] = [s for s in spans if s["name"] == "POST /items"]
    # The cancelled item: its pod's next renewal finds the claim gone (lease lost), unless its
    # 2 s timeout comes first on a loaded machine; either way the claim is no longer ours.
    expected = {crash: ("crashed", set()), hang: ("timed_out", {"dbworker.timed_out"}),
                cancelled: ("lost", {"dbworker.lease_lost", "dbworker.timed_out"})}  # fmt: skip
    for key, (outcome, events) in expected.items():
        [claim] = _of(spans, "claim items", key)
        assert claim["attributes"]["dbworker.outcome"] == outcome and claim["status"] == 2, claim
        assert claim["trace_id"] == request["trace_id"] and claim["parent_id"] == request["span_id"]
        if events:
            assert events & {e["name"] for e in claim["events"]}, claim["events"]
    assert "killed by SIGKILL" in _of(spans, "claim items", crash)[0]["status_message"]


def test_each_coroutine_of_an_async_handler_has_its_process_span(db: Database, tmp_path: Path) -> None:
    basic.build(db.url)
    with receiver() as (endpoint, got):
        made = json.loads(_run(["produce", db.url, "together:4", "together:4", "together:4", "fail", "finish"],
                               _env(endpoint, "api")))  # fmt: skip
        *together, fail, core = made["ids"]
        _run(["consume-async", db.url, str(tmp_path / "pod.log"), "0", "2", *map(str, made["ids"])],
             _env(endpoint, "pod"))  # fmt: skip

        def complete() -> bool:
            spans = got.all_spans()
            return len(_of(spans, "process items", fail)) >= 2 and all(_of(spans, "process items", i) for i in together)

        wait_until(complete, timeout=60, what="the process spans of every async item at the receiver")
        spans = got.all_spans()

    [request] = [s for s in spans if s["name"] == "POST /items"]
    processes = []
    for key in together:  # ran at once, each in a span of its own, the child of its claim's
        [claim] = _of(spans, "claim items", key)
        [process] = _of(spans, "process items", key)
        assert process["trace_id"] == claim["trace_id"] == request["trace_id"]
        assert process["parent_id"] == claim["span_id"] and process["kind"] == 5
        attrs = process["attributes"]
        assert attrs["messaging.operation.type"] == "process" and attrs["dbworker.outcome"] == "finished"
        assert attrs["dbworker.worker"] == "items" and attrs["dbworker.key"] == str(key)
        assert process["resource"]["service.name"] == "pod" and process["status"] != 2
        processes.append(process)
    assert max(p["start"] for p in processes) < min(p["end"] for p in processes)  # overlapping
    failures = _of(spans, "process items", fail)
    assert [f["attributes"]["dbworker.outcome"] for f in failures] == ["retried", "failed"]
    assert [f["parent_id"] for f in failures] == [c["span_id"] for c in _of(spans, "claim items", fail)]
    for failed in failures:
        [exc] = [e for e in failed["events"] if e["name"] == "exception"]
        assert failed["status"] == 2 and "asked to fail" in exc["attributes"]["exception.message"]
    [alone] = _of(spans, "claim items", core)
    assert _of(spans, "process items", core)[0]["parent_id"] == alone["span_id"]
