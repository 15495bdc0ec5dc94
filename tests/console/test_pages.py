"""The console's pages and API over a real database (SQLite, PostgreSQL, MariaDB), in-process.

Sign-in and refusals, what each page shows, the actions with their CSRF checks, read-only
mode, and the API with Bearer tokens.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from dbworker import ExecutionStatus
from dbworker.console import app
from dbworker.observe import Observer
from tests.acceptance import app as taskapp
from tests.acceptance.conftest import AppDb
from tests.conftest import Database
from tests.console.conftest import TOKENS, ClientFactory, csrf_of
from tests.console.support import SECRET
from tests.helpers import wait_until


def _run_until_settled(appdb: AppDb, *ids: int) -> None:
    """Run the workers until the given tasks are finished or failed."""
    c = taskapp.build(appdb.url)
    c.start()
    try:
        wait_until(
            lambda: all(
                (s := appdb.state("main", i)) is not None
                and s["execution_status"] in (ExecutionStatus.FINISHED, ExecutionStatus.FAILED)
                for i in ids
            ),
            timeout=60,
            what=f"tasks {ids} to settle",
        )
    finally:
        c.stop(timeout=10)


def test_without_a_token_pages_redirect_to_sign_in_and_the_api_refuses(make_client: ClientFactory) -> None:
    client = make_client(signed_in=False)
    r = client.get("/workers/main?status=failed", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=%2Fworkers%2Fmain%3Fstatus%3Dfailed"
    login = client.get("/login")
    assert "<label for=\"token\">Token</label>" in login.text and ">Sign in</button>" in login.text
    api = client.get("/api/workers")
    assert api.status_code == 401 and api.headers["www-authenticate"] == "Bearer"
    assert client.post("/api/workers/main/pause").status_code == 401
    assert client.get("/api/workers", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
    wrong = client.post("/login", data={"token": "not-the-token-at-all", "next": "/"}, follow_redirects=False)
    assert wrong.status_code == 401 and "That token is not valid" in wrong.text
    assert "set-cookie" not in wrong.headers
    assert client.get("/healthz").text == "ok\n"  # the probe needs no token


def test_sign_in_sets_a_strict_http_only_cookie_and_returns_to_the_page(make_client: ClientFactory) -> None:
    client = make_client(signed_in=False)
    r = client.post("/login", data={"token": SECRET, "next": "/workers/main"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/workers/main"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert SECRET not in r.headers["set-cookie"]
    page = client.get("/workers/main")
    assert page.status_code == 200 and "signed in as <b>alice</b>" in page.text
    # Only paths of the console are followed after sign-in.
    away = client.post("/login", data={"token": SECRET, "next": "//evil.example/"}, follow_redirects=False)
    assert away.headers["location"] == "/"


def test_overview_worker_and_item_pages_show_a_failed_item_and_its_source_row(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    appdb_all.add({"id": 1, "action": "fail"}, {"id": 2}, {"id": 3, "kind": "other"})
    _run_until_settled(appdb_all, 1, 2)
    client = make_client()
    overview = client.get("/")
    assert overview.status_code == 200
    row = re.search(r'<tr data-worker="main">(.*?)</tr>', overview.text, re.S)
    assert row, overview.text
    assert 'status=failed">1</a>' in row.group(1) and 'status=finished">1</a>' in row.group(1)
    failed = client.get("/workers/main?status=failed")
    assert 'data-id="1"' in failed.text and 'data-id="2"' not in failed.text
    assert "task 1 failed on purpose" in failed.text
    assert ">Retry</button>" in failed.text and ">Retry all</a>" in failed.text
    item = client.get("/workers/main/items/1")
    assert "task 1 failed on purpose" in item.text
    assert "Traceback" in item.text and "RuntimeError" in item.text
    assert "<th>action</th><td><code>fail</code></td>" in item.text  # the source row's columns
    assert client.get("/workers/main/items/999").status_code == 404
    bad = client.get("/workers/main/items/abc")
    assert bad.status_code == 400 and "is not an integer" in bad.text
    assert client.get("/workers/nope").status_code == 404
    assert "is not one of" in client.get("/workers/main?status=broken").text


def test_retry_needs_the_forms_csrf_value_and_resets_the_item(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.add({"id": 1, "action": "fail"})
    _run_until_settled(appdb_all, 1)
    client = make_client()
    page = client.get("/workers/main?status=failed")
    assert client.post("/workers/main/items/1/retry", data={"csrf": "forged"}).status_code == 403
    cross = client.post(
        "/workers/main/items/1/retry", data={"csrf": csrf_of(page.text)}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    assert appdb_all.state("main", 1)["execution_status"] is ExecutionStatus.FAILED
    r = client.post(
        "/workers/main/items/1/retry", data={"csrf": csrf_of(page.text), "back": "/workers/main?status=failed"},
        follow_redirects=False,
    )  # fmt: skip
    assert r.status_code == 303 and r.headers["location"] == "/workers/main?status=failed&done=retried"
    assert appdb_all.state("main", 1)["execution_status"] is ExecutionStatus.UNFINISHED
    assert "Item reset" in client.get(r.headers["location"]).text


def test_retry_all_confirms_with_the_count_then_resets_every_failed_item(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    appdb_all.add(*({"id": i, "action": "fail"} for i in (1, 2, 3)))
    _run_until_settled(appdb_all, 1, 2, 3)
    client = make_client()
    confirm = client.get("/workers/main/retry-all")
    assert "This resets <b>3</b> failed item(s)" in confirm.text and ">Retry all 3</button>" in confirm.text
    r = client.post("/workers/main/retry-all", data={"csrf": csrf_of(confirm.text)})
    assert r.status_code == 200
    assert all(appdb_all.state("main", i)["execution_status"] is ExecutionStatus.UNFINISHED for i in (1, 2, 3))


def test_cancel_a_waiting_item_and_pause_from_the_page(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.add({"id": 5})
    client = make_client()
    page = client.get("/workers/main/items/5")
    assert "Never claimed" in page.text
    client.post("/workers/main/items/5/cancel", data={"csrf": csrf_of(page.text)})
    state = appdb_all.state("main", 5)
    assert state["execution_status"] is ExecutionStatus.FAILED and state["error"] == "cancelled"
    page = client.get("/")
    client.post("/workers/main/pause", data={"csrf": csrf_of(page.text), "back": "/"})
    overview = client.get("/").text
    assert "paused</span> <span class=\"dim\">by alice</span>" in overview
    with Session(appdb_all.db.engine) as s:
        assert appdb_all.coordinator.workers["main"].paused(s)
    client.post("/workers/main/resume", data={"csrf": csrf_of(overview), "back": "/"})
    with Session(appdb_all.db.engine) as s:
        assert not appdb_all.coordinator.workers["main"].paused(s)


def test_read_only_shows_no_action_and_refuses_every_post(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.add({"id": 1, "action": "fail"}, {"id": 2})
    _run_until_settled(appdb_all, 1)
    client = make_client(read_only=True)
    for path in ("/", "/workers/main?status=failed", "/workers/main/items/1", "/workers/main/items/2"):
        html = client.get(path).text
        actions = re.sub(r'<form method="post" action="/logout".*?</form>', "", html, flags=re.S)
        assert 'method="post"' not in actions, path
        assert not re.search(r">(Retry|Retry all|Cancel|Pause|Resume)<", actions), path
        assert "read-only" in html
    for path in ("/workers/main/items/1/retry", "/workers/main/items/2/cancel", "/workers/main/retry-all",
                 "/workers/main/pause", "/workers/main/resume"):  # fmt: skip
        assert client.post(path, data={"csrf": "x"}).status_code == 403, path
        api = client.post("/api" + path, headers={"Authorization": f"Bearer {SECRET}"})
        assert api.status_code == 403 and "read-only" in api.json()["detail"], path
    assert client.get("/workers/main/retry-all").status_code == 403
    assert appdb_all.state("main", 1)["execution_status"] is ExecutionStatus.FAILED


def test_api_reads_and_acts_with_a_bearer_token(make_client: ClientFactory, appdb_all: AppDb) -> None:
    appdb_all.add({"id": 1, "action": "fail"}, {"id": 2}, {"id": 3})
    _run_until_settled(appdb_all, 1, 2, 3)
    client = make_client(signed_in=False)
    auth = {"Authorization": f"Bearer {SECRET}"}
    workers = client.get("/api/workers", headers=auth).json()["workers"]
    main = next(w for w in workers if w["name"] == "main")
    assert main["counts"]["failed"] == 1 and main["counts"]["finished"] == 2
    assert main["failed_last_hour"] == 1
    assert main["paused"] is False and main["concurrency"] == 2
    page = client.get("/api/workers/main/items?limit=2", headers=auth).json()
    assert [i["id"] for i in page["items"]] == [3, 2] and page["next"] == 2
    rest = client.get("/api/workers/main/items?limit=2&before=2", headers=auth).json()
    assert [i["id"] for i in rest["items"]] == [1] and rest["next"] is None
    assert client.get("/api/workers/main/items?status=bogus", headers=auth).status_code == 400
    one = client.get("/api/workers/main/items/1", headers=auth).json()
    assert one["state"]["status"] == "failed" and "RuntimeError" in one["state"]["traceback"]
    assert one["source"]["action"] == "fail"
    finished = client.get("/api/workers/main/items/2", headers=auth).json()["state"]
    assert finished["status"] == "finished" and finished["ended_at"].endswith(" UTC")
    assert finished["pod"] is not None and finished["pid"] is not None  # who ran it
    assert client.post("/api/workers/main/items/1/retry", headers=auth).json() == {"retried": True}
    assert client.post("/api/workers/main/items/1/retry", headers=auth).json() == {"retried": False}
    assert client.post("/api/workers/main/pause", headers=auth).json() == {"paused": True, "changed": True}
    assert client.get("/api/workers", headers=auth).json()["workers"][0]["paused_by"] == "alice"
    assert client.post("/api/workers/main/resume", headers=auth).json()["changed"] is True
    spec = client.get("/api/openapi.json", headers=auth).json()
    assert "/api/workers/{worker}/items/{item_id}/retry" in spec["paths"]
    signed = make_client()
    assert "/api/workers/{worker}/pause" in signed.get("/api/docs").text


class _Running(Observer):
    """How many handlers each worker runs, as the coordinator reports it (its public hook)."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}

    def active(self, worker: str, *, running: int) -> None:
        self.now[worker] = running


def test_running_items_show_the_pod_and_process_that_hold_them(make_client: ClientFactory, appdb_all: AppDb) -> None:
    import os
    import socket

    appdb_all.add({"id": 1, "action": "sleep", "seconds": 60})
    c = taskapp.build(appdb_all.url)
    running = _Running()
    c.add_observer(running)
    c.start()
    try:
        wait_until(lambda: appdb_all.state("main", 1) is not None and appdb_all.state("main", 1)["execution_status"]
                   is ExecutionStatus.WORKING, timeout=60, what="task 1 to run")  # fmt: skip
        client = make_client()
        html = client.get("/workers/main?status=working").text
        row = re.search(r'<tr data-id="1">(.*?)</tr>', html, re.S).group(1)  # type: ignore[union-attr]
        assert f"<td>{socket.gethostname()}</td>" in row and f"<td>{os.getpid()}</td>" in row
        assert ">Cancel</button>" in row
        overview = client.get("/").text
        assert f"{socket.gethostname()} (pid {os.getpid()}): 1 / 2" in overview
        client.post("/workers/main/items/1/cancel", data={"csrf": csrf_of(html)})
        wait_until(lambda: running.now.get("main") == 0, timeout=60, what="the cancelled handler to end")
        assert appdb_all.state("main", 1)["error"] == "cancelled"
    finally:
        c.stop(timeout=10)


def test_no_token_on_loopback_acts_as_local(make_client: ClientFactory, appdb_all: AppDb) -> None:
    client = make_client(tokens={})
    client.base_url = "http://127.0.0.1:8080"  # without tokens only loopback hosts are answered
    page = client.get("/")
    assert page.status_code == 200 and "signed in as <b>local</b>" in page.text
    assert "Sign out" not in page.text
    client.post("/workers/main/pause", data={"csrf": csrf_of(page.text), "back": "/"})
    with Session(appdb_all.db.engine) as s:
        assert appdb_all.coordinator.workers["main"].paused(s)
        assert s.scalar(sa.text("SELECT paused_by FROM dbworker_paused")) == "local"


def test_the_overview_shows_schedules_with_their_next_due_time_and_last_result(db: Database) -> None:
    from tests.apps import periodic

    c = periodic.build(db.url, every=1)
    try:
        client = TestClient(app.build(c, tokens=TOKENS, read_only=True))
        api = client.get("/api/workers", headers={"Authorization": f"Bearer {SECRET}"}).json()
        [sync] = [w for w in api["workers"] if w["name"] == "sync"]
        assert sync["schedule"]["schedule"] and sync["schedule"]["next_due_at"] and sync["schedule"]["last"] is None
        assert [w["schedule"] for w in api["workers"] if w["name"] == "publish"] == [None]
        assert client.post("/login", data={"token": SECRET, "next": "/"}, follow_redirects=False).status_code == 303
        assert "next due" in client.get("/").text and "none yet" in client.get("/").text
        c.start()
        wait_until(lambda: "last: finished" in client.get("/").text, timeout=60, what="a tick's result on the page")
    finally:
        c.abort()
