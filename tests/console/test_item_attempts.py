"""The console's item page and API show the attempt history and the latest progress (issue 30),
and the page polls the progress while the item runs; each traced attempt names its trace,
linked when the console has a trace UI address (``--trace-url``)."""

from __future__ import annotations

import sqlalchemy as sa

from dbworker import ExecutionStatus
from dbworker.sql import history, progress
from tests.acceptance import app as taskapp
from tests.acceptance.conftest import AppDb
from tests.console.conftest import ClientFactory
from tests.helpers import wait_until


def test_item_page_and_api_show_the_attempts_and_the_progress(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.add({"id": 1, "action": "fail"}, {"id": 2})
    c = taskapp.build(appdb_all.url)
    c.start()
    try:
        wait_until(lambda: all((s := appdb_all.state("main", i)) is not None and s["execution_status"]
                               in (ExecutionStatus.FINISHED, ExecutionStatus.FAILED) for i in (1, 2)),
                   timeout=60, what="tasks to settle")  # fmt: skip
    finally:
        c.stop(timeout=10)
    client = make_client()
    page = client.get("/workers/main/items/1")
    assert "Attempts (oldest first)" in page.text
    assert '<span class="status failed">failed</span></td>' in page.text and "task 1 failed on purpose" in page.text
    # The attempt's log records, and its bar on the timeline (an SVG: no inline style).
    assert "1 record</summary>" in page.text and "WARNING taskapp: task 1 is about to fail" in page.text
    assert '<rect class="bar failed" x="0" y="2" width="1000"' in page.text and 'href="#attempt-1"' in page.text
    found = client.get("/api/workers/main/items/1").json()
    [attempt] = found["state"]["history"]
    assert attempt["outcome"] == "failed" and attempt["pod"] and attempt["pid"] and attempt["ended_at"].endswith("UTC")
    [record] = attempt["logs"]
    assert (record["level"], record["logger"], record["message"]) == ("WARNING", "taskapp", "task 1 is about to fail")
    assert attempt["bar"] == [0, 1000] and found["state"]["timeline"]["width"] == 1000
    assert found["state"]["progress"] is None
    # A running item (claimed by hand) that reported progress: shown, and polled.
    table = appdb_all.coordinator.workers["main"].table
    with appdb_all.db.engine.begin() as conn:
        conn.execute(sa.update(table).where(table.c.source_id == 2).values(execution_status="working", claim_token="t"))
    with appdb_all.db.engine.connect() as conn:
        assert progress.write(conn, table, 2, "t", fraction=0.4, note="rows 400 of 1000")
    page = client.get("/workers/main/items/2")
    assert "40% rows 400 of 1000" in page.text and 'hx-trigger="every 2s"' in page.text
    assert client.get("/api/workers/main/items/2").json()["state"]["progress"]["fraction"] == 0.4


TRACE = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def add_traced_attempt(appdb: AppDb, task: int) -> None:
    """A finished task with two attempts kept: one traced, one not (tracing off then)."""
    appdb.add({"id": task})
    work = appdb.coordinator.workers["main"].table
    with appdb.db.engine.begin() as conn:
        conn.execute(sa.insert(work).values(source_id=task, execution_status="finished", attempts=1))
        kept = history.history_table(work)
        history.record(conn, kept, task, outcome="retried", started_at=None, claimed_by="pod-a:7", error="boom")
        history.record(conn, kept, task, outcome="finished", started_at=None, claimed_by="pod-b:8", trace=TRACE)


def test_item_page_and_api_name_each_attempts_trace(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.create_worker_tables()
    add_traced_attempt(appdb_all, 3)
    plain = make_client()
    page = plain.get("/workers/main/items/3")
    assert f'<code class="trace" title="span {TRACE[1]}">{TRACE[0]}</code>' in page.text and 'class="trace" href' not in page.text
    untraced, traced = plain.get("/api/workers/main/items/3").json()["state"]["history"]
    assert (untraced["trace_id"], untraced["span_id"], untraced["trace_url"]) == (None, None, None)
    assert (traced["trace_id"], traced["span_id"], traced["trace_url"]) == (*TRACE, None)
    linked = make_client(trace_url="https://traces.example/t/{trace_id}?span={span_id}")
    address = f"https://traces.example/t/{TRACE[0]}?span={TRACE[1]}"
    assert f'<a class="trace" href="{address}"' in linked.get("/workers/main/items/3").text
    assert linked.get("/api/workers/main/items/3").json()["state"]["history"][1]["trace_url"] == address
