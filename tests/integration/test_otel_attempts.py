"""Each attempt in its trace (issues 30 and 31), through a real OTLP/HTTP receiver.

An attempt's history row names its ``process`` span (trace and span ids), so the console can
link it; and an item whose row carried no writer's context keeps its first attempt's claim
span in the trace table, so a later attempt, run by another coordinator process, is in the
same trace, the child of that first claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from dbworker.pod import cli
from tests.apps import basic
from tests.conftest import Database
from tests.helpers import wait_until
from tests.integration.test_otel import _env, _of, _run
from tests.otlp import receiver

pytestmark = pytest.mark.slow


def _history(db: Database, key: int) -> list[dict[str, Any]]:
    c = basic.build(db.url, app_tables=False, work_tables=False)
    with Session(c.engine) as s:
        state = c.workers["items"].state(s, key)
    assert state is not None
    return list(state["history"])


def _named(spans: list[dict[str, Any]], history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each history row's (trace id, span id) as the exported process spans have them."""
    assert all(h["trace_id"] and h["span_id"] for h in history), history
    return [(h["trace_id"], h["span_id"]) for h in history]


def test_each_history_row_names_its_attempts_process_span(db: Database, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    basic.build(db.url)
    with receiver() as (endpoint, got):
        made = json.loads(_run(["produce", db.url, "finish", "flaky:2"], _env(endpoint, "api")))
        finish, core = made["ids"]  # the second written by a Core insert: no writer's context
        _run(["consume", db.url, str(tmp_path / "pod.log"), "0", "3", *map(str, made["ids"])], _env(endpoint, "pod"))
        wait_until(lambda: len(_of(got.all_spans(), "process items", core)) >= 2 and _of(got.all_spans(),
                   "process items", finish), timeout=60, what="the process spans of both items")  # fmt: skip
        spans = got.all_spans()
    for key in (finish, core):
        processes = _of(spans, "process items", key)
        history = _history(db, key)
        assert [h["outcome"] for h in history] == [p["attributes"]["dbworker.outcome"] for p in processes]
        assert _named(spans, history) == [(p["trace_id"], p["span_id"]) for p in processes]
    assert _history(db, finish)[0]["trace_id"] == made["trace_id"]  # the request's trace
    # `dbworker inspect --item` prints each attempt's trace; --json has the ids.
    monkeypatch.setattr(basic, "inspected", basic.build(db.url, app_tables=False, work_tables=False), raising=False)
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--worker", "items", "--item", str(core)]) == 0
    out = capsys.readouterr().out
    assert all(f"trace {h['trace_id']}" in out for h in _history(db, core))
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--worker", "items", "--item", str(core), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["item"]["history"]
    assert [(a["trace_id"], a["span_id"]) for a in shown] == _named(spans, _history(db, core))
    # The item with no writer's context: its retry is the child of its first claim, one trace.
    first, second = _of(spans, "claim items", core)
    assert first["parent_id"] is None and second["parent_id"] == first["span_id"]
    assert second["trace_id"] == first["trace_id"] != made["trace_id"]


def test_a_later_attempt_on_another_coordinator_is_in_the_first_attempts_trace(db: Database, tmp_path: Path) -> None:
    basic.build(db.url)
    flaky, later = basic.add_items(db.engine, ["flaky:2", "later:4"])  # no span: no writer's context
    with receiver() as (endpoint, got):
        # Pod A runs each first attempt (a retry after 4 s; an Unfinished step waiting 4 s) and stops.
        _run(["consume-first", db.url, str(tmp_path / "a.log"), str(flaky), str(later)], _env(endpoint, "pod-a"))
        # Pod B, a new process, runs the next attempts.
        _run(["consume", db.url, str(tmp_path / "b.log"), "0", "3", str(flaky), str(later)], _env(endpoint, "pod-b"))

        def complete() -> bool:
            spans = got.all_spans()
            return all(len(_of(spans, name, key)) >= 2 for name in ("claim items", "process items")
                       for key in (flaky, later))  # fmt: skip

        wait_until(complete, timeout=60, what="two claim and two process spans of each item")
        spans = got.all_spans()
    for key, outcomes in ((flaky, ["retried", "finished"]), (later, ["unfinished", "finished"])):
        first, second = _of(spans, "claim items", key)
        assert [first["resource"]["service.name"], second["resource"]["service.name"]] == ["pod-a", "pod-b"]
        assert [first["attributes"]["dbworker.outcome"], second["attributes"]["dbworker.outcome"]] == outcomes
        assert first["parent_id"] is None
        assert second["trace_id"] == first["trace_id"] and second["parent_id"] == first["span_id"]
        processes = _of(spans, "process items", key)
        assert [p["parent_id"] for p in processes] == [first["span_id"], second["span_id"]]
        assert _named(spans, _history(db, key)) == [(p["trace_id"], p["span_id"]) for p in processes]
