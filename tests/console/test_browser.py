"""The console in a real browser (Debian's chromium driven by Playwright) over a real database.

Two `dbworker run` processes work on the acceptance application; a `dbworker console`
process serves the console. The browser signs in, sees a failed item's error, retries it
and watches it finish, cancels a running item, pauses and resumes a worker across both
processes; read-only mode has no buttons and refuses POSTs; a request without the token is
refused. With DBWORKER_CONSOLE_SCREENSHOTS=<dir> the overview and a worker page are saved
there (docs/console.md shows them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbworker import ExecutionStatus
from tests.acceptance import app as taskapp
from tests.acceptance.conftest import AppDb
from tests.acceptance.support import Worker
from tests.console.support import SECRET, ConsoleProcess
from tests.console.test_item_attempts import TRACE, add_traced_attempt
from tests.console.test_item_filters import _fill
from tests.helpers import wait_until

CHROMIUM = "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (apt-get install chromium)")


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def _status(appdb: AppDb, worker: str, task: int) -> ExecutionStatus | None:
    state = appdb.state(worker, task)
    return None if state is None else state["execution_status"]  # type: ignore[no-any-return]


def _sign_in(page: object, url: str) -> None:
    page.goto(url + "/")  # type: ignore[attr-defined]
    page.get_by_label("Token").fill(SECRET)  # type: ignore[attr-defined]
    page.get_by_role("button", name="Sign in").click()  # type: ignore[attr-defined]
    page.wait_for_selector("text=signed in as")  # type: ignore[attr-defined]


def _shot(page: object, name: str) -> None:
    target = os.environ.get("DBWORKER_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / name), full_page=True)  # type: ignore[attr-defined]


def test_operate_the_workers_from_a_browser(appdb: AppDb, tmp_path: Path, browser: object) -> None:
    appdb.create_worker_tables()
    appdb.add(
        {"id": 1, "action": "fail"},
        {"id": 2, "action": "sleep", "seconds": 300},
        {"id": 3},
    )
    workers = [Worker(appdb.url, tmp_path), Worker(appdb.url, tmp_path)]
    console = None
    try:
        for w in workers:
            w.wait_ready()
        wait_until(lambda: _status(appdb, "main", 1) is ExecutionStatus.FAILED
                   and _status(appdb, "main", 2) is ExecutionStatus.WORKING, timeout=60, what="task 1 failed, 2 running")  # fmt: skip
        console = ConsoleProcess(appdb.url, tmp_path)
        context = browser.new_context(viewport={"width": 1400, "height": 800})  # type: ignore[attr-defined]
        page = context.new_page()
        # The pages (htmx included) live within their Content-Security-Policy.
        refused: list[str] = []
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)

        # Without the token: the page sends the browser to sign in; the API refuses.
        page.goto(console.url + "/workers/main")
        assert "/login" in page.url
        assert context.request.get(console.url + "/api/workers").status == 401

        _sign_in(page, console.url)
        assert page.locator('tr[data-worker="main"]').is_visible()
        _shot(page, "overview.png")

        # The failed item's error, then Retry once the application's bug is fixed.
        page.goto(console.url + "/workers/main?status=failed")
        row = page.locator('tr[data-id="1"]')
        assert "task 1 failed on purpose" in row.inner_text()
        with appdb.db.engine.begin() as conn:
            conn.execute(sa.update(taskapp.Task).where(taskapp.Task.id == 1).values(action="finish"))
        row.get_by_role("button", name="Retry").click()
        page.wait_for_selector("text=Item reset")
        page.goto(console.url + "/workers/main/items/1")
        wait_until(lambda: page.reload() and "finished" in page.locator("dl.facts").inner_text(),
                   timeout=60, what="item 1 to show finished")  # fmt: skip

        # The running item names the pod and the process holding it; Cancel ends it.
        page.goto(console.url + "/workers/main?status=working")
        running = page.locator('tr[data-id="2"]')
        cells = running.locator("td").all_inner_texts()
        assert int(cells[6]) in {w.pid for w in workers}, cells
        _shot(page, "worker.png")
        running.get_by_role("button", name="Cancel").click()
        page.wait_for_selector("text=Item cancelled")
        wait_until(lambda: (appdb.state("main", 2) or {}).get("error") == "cancelled", what="task 2 cancelled")
        wait_until(lambda: all(w.value("dbworker_handlers_active", worker="main") == 0 for w in workers),
                   timeout=60, what="the cancelled handler to end")  # fmt: skip

        # Pause: both processes stop claiming for main (other keeps working); Resume.
        page.goto(console.url + "/")
        page.locator('tr[data-worker="main"]').get_by_role("button", name="Pause").click()
        page.wait_for_selector("text=Worker paused")
        assert "paused" in page.locator('tr[data-worker="main"] td.state').inner_text()
        for w in workers:
            w.wait_value("dbworker_paused", 1, worker="main")
        appdb.add({"id": 4}, {"id": 5, "kind": "other"})
        wait_until(lambda: _status(appdb, "other", 5) is ExecutionStatus.FINISHED, what="the unpaused worker's task")
        for w in workers:  # both loops polled since task 5 was added...
            w.wait_value("dbworker_paused", 1, worker="main")
        assert _status(appdb, "main", 4) is None  # ... and neither claimed the paused worker's
        page.locator('tr[data-worker="main"]').get_by_role("button", name="Resume").click()
        page.wait_for_selector("text=Worker resumed")
        wait_until(lambda: _status(appdb, "main", 4) is ExecutionStatus.FINISHED, timeout=60, what="task 4 after resume")
        for w in workers:
            w.wait_value("dbworker_paused", 0, worker="main")
        assert not refused, refused
        context.close()
    finally:
        if console is not None:
            console.close()
        for w in workers:
            w.close()


def test_read_only_console_in_a_browser_has_no_buttons_and_refuses_posts(
    appdb: AppDb, tmp_path: Path, browser: object
) -> None:
    appdb.create_worker_tables()
    appdb.add({"id": 1, "action": "fail"})
    c = taskapp.build(appdb.url)
    c.start()
    try:
        wait_until(lambda: _status(appdb, "main", 1) is ExecutionStatus.FAILED, what="task 1 to fail")
    finally:
        c.stop(timeout=10)
    console = ConsoleProcess(appdb.url, tmp_path, "--read-only")
    try:
        context = browser.new_context()  # type: ignore[attr-defined]
        page = context.new_page()
        _sign_in(page, console.url)
        for path in ("/", "/workers/main?status=failed", "/workers/main/items/1"):
            page.goto(console.url + path)
            assert page.get_by_text("read-only").first.is_visible()
            for label in ("Retry", "Retry all", "Cancel", "Pause", "Resume"):
                assert page.get_by_role("button", name=label, exact=True).count() == 0, (path, label)
        # A POST made anyway (the session's cookie is sent) is refused.
        r = context.request.post(console.url + "/workers/main/items/1/retry", form={"csrf": "x"})
        assert r.status == 403 and "read-only" in r.text()
        api = context.request.post(console.url + "/api/workers/main/pause", headers={"Authorization": f"Bearer {SECRET}"})
        assert api.status == 403
        assert _status(appdb, "main", 1) is ExecutionStatus.FAILED
        context.close()
    finally:
        console.close()



def test_item_page_timeline_and_attempt_logs_in_a_browser(appdb: AppDb, tmp_path: Path, browser: object) -> None:
    appdb.create_worker_tables()
    appdb.add({"id": 1, "action": "fail"})
    c = taskapp.build(appdb.url)
    c.start()
    try:
        wait_until(lambda: _status(appdb, "main", 1) is ExecutionStatus.FAILED, what="task 1 to fail")
    finally:
        c.stop(timeout=10)
    console = ConsoleProcess(appdb.url, tmp_path)
    try:
        context = browser.new_context()  # type: ignore[attr-defined]
        page = context.new_page()
        refused: list[str] = []
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        _sign_in(page, console.url)
        page.goto(console.url + "/workers/main/items/1")
        bar = page.locator("figure.timeline rect.bar.failed")
        box = bar.bounding_box()
        assert box is not None and box["width"] > 100  # the one attempt spans the axis
        bar.click()
        assert page.url.endswith("#attempt-1")
        row = page.locator("tr#attempt-1")
        assert not row.locator("pre.logs").is_visible()
        row.locator("details.logs summary").click()
        assert "WARNING taskapp: task 1 is about to fail" in row.locator("pre.logs").inner_text()
        _shot(page, "item.png")
        assert not refused, refused
        context.close()
    finally:
        console.close()


def test_item_page_links_each_traced_attempt_in_a_browser(appdb: AppDb, tmp_path: Path, browser: object) -> None:
    appdb.create_worker_tables()
    add_traced_attempt(appdb, 3)
    template = "http://127.0.0.1:9/trace/{trace_id}?span={span_id}"
    console = ConsoleProcess(appdb.url, tmp_path, env={"DBWORKER_TRACE_URL": template})
    try:
        context = browser.new_context()  # type: ignore[attr-defined]
        page = context.new_page()
        _sign_in(page, console.url)
        page.goto(console.url + "/workers/main/items/3")
        assert page.locator("tr#attempt-1 .trace").count() == 0  # not traced: no link
        link = page.locator("tr#attempt-2 a.trace")
        assert link.is_visible() and link.get_attribute("href") == template.format(trace_id=TRACE[0], span_id=TRACE[1])
        assert link.inner_text() == TRACE[0][:8] + "…" and link.get_attribute("title") == f"span {TRACE[1]}"
        context.close()
    finally:
        console.close()


def test_find_items_by_their_data_and_act_on_them_in_a_browser(appdb: AppDb, tmp_path: Path, browser: object) -> None:
    appdb.create_worker_tables()
    _fill(appdb)  # the same 30 items as tests/console/test_item_filters.py: kinds a/b, every third failed
    console = ConsoleProcess(appdb.url, tmp_path)
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 900})  # type: ignore[attr-defined]
        page = context.new_page()
        refused: list[str] = []
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        _sign_in(page, console.url)
        page.goto(console.url + "/workers/main")
        page.locator("details.finder summary").click()
        page.locator('form.finder select[name="status"]').select_option("failed")
        page.get_by_label("kind equals").fill("a")
        page.locator("form.finder").get_by_role("button", name="Filter").click()
        page.wait_for_selector("text=(filtered)")
        assert page.locator("table.items tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)") == [
            "27", "21", "15", "9", "3"]  # fmt: skip
        _shot(page, "worker-filtered.png")
        page.get_by_role("link", name="Retry…").click()
        assert "This changes 5 item(s)" in page.locator("#set-count").inner_text()
        page.get_by_role("button", name="Retry 5").click()
        page.wait_for_selector("text=Actions on sets of items")
        assert "the items the filter matched were changed" in page.content()
        audit = page.locator("table.audit tbody tr").first.inner_text()
        assert "retry" in audit and "status=failed&col.kind=a" in audit and audit.rstrip().endswith("5")
        assert page.locator("table.items tbody").inner_text().startswith("No failed items matching the filter")
        assert not refused, refused
        context.close()
    finally:
        console.close()
