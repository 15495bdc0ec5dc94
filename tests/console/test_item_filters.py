"""Finding items by their data (issue 30): the worker page and the API's items endpoint filter
by status, time (the item's last change: ``changed_at``, its latest claim or its end), error
text and the source model's indexed columns, page by key, and refuse a wrong parameter with a
400 naming it."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from tests.acceptance import app as taskapp
from tests.acceptance.conftest import AppDb
from tests.console.conftest import ClientFactory
from tests.console.support import SECRET
from tests.helpers import wait_until

T0 = dt.datetime(2026, 12, 1, 10, 0)
AUTH = {"Authorization": f"Bearer {SECRET}"}


def _fill(appdb: AppDb, n: int = 30) -> None:
    appdb.add(*({"id": i, "kind": "a" if i % 2 else "b"} for i in range(1, n + 1)))
    table = appdb.coordinator.workers["main"].table
    with appdb.db.engine.begin() as conn:
        conn.execute(sa.insert(table), [{
            "source_id": i, "execution_status": "failed" if i % 3 == 0 else "finished",
            "error": (f"Timeout talking to 10.0.0.{i}" if i % 2 else "boom 100%_sure") if i % 3 == 0 else None,
            "ended_at": T0 + dt.timedelta(minutes=i), "changed_at": T0 + dt.timedelta(minutes=i), "attempts": 1,
        } for i in range(1, n + 1)])  # fmt: skip


def _ids(client: Any, query: str) -> list[int]:
    """Every id the API lists for ``query``, following ``next`` two at a time."""
    found: list[int] = []
    before = ""
    while True:
        r = client.get(f"/api/workers/main/items?{query}&limit=2{before}", headers=AUTH)
        assert r.status_code == 200, r.text
        body = r.json()
        found += [row["id"] for row in body["items"]]
        if body["next"] is None:
            return found
        before = f"&before={body['next']}"


def test_the_api_filters_and_pages_by_key(make_client: ClientFactory, appdb_all: AppDb) -> None:
    _fill(appdb_all)
    client = make_client()
    assert _ids(client, "status=failed&col.kind=a") == [27, 21, 15, 9, 3]
    assert _ids(client, "since=2026-12-01T10:05:00Z&until=2026-12-01T11:10:00%2B01:00") == [10, 9, 8, 7, 6, 5]
    assert _ids(client, "error=TIMEOUT") == [27, 21, 15, 9, 3]  # any case
    assert _ids(client, "error=100%25_") == [30, 24, 18, 12, 6]  # % and _ are plain characters
    assert _ids(client, "error=9%25") == []  # no "9%" anywhere (as a pattern it would match)
    assert _ids(client, "col.id.gte=10&col.id.lte=13&col.kind=b") == [12, 10]
    assert _ids(client, "col.kind=c") == []
    body = client.get("/api/workers/main/items?status=failed&col.kind=a&limit=1", headers=AUTH).json()
    assert body["filter"] == {"status": "failed", "col.kind": "a"} and body["status"] == "failed"


def test_the_last_change_is_the_claim_of_a_running_item_and_the_end_of_an_ended_one(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    appdb_all.add({"id": 1}, {"id": 2, "action": "fail"}, {"id": 3, "action": "sleep", "seconds": 60})
    table = appdb_all.coordinator.workers["main"].table

    def times() -> dict[int, tuple[Any, Any]]:
        with appdb_all.db.engine.connect() as conn:
            return {r[0]: (r[1], r[2]) for r in conn.execute(sa.select(table.c.source_id, table.c.changed_at, table.c.ended_at))}

    c = taskapp.build(appdb_all.url)
    c.start()
    try:
        wait_until(lambda: [(appdb_all.state("main", i) or {}).get("execution_status") for i in (1, 2, 3)] == [
            ExecutionStatus.FINISHED, ExecutionStatus.FAILED, ExecutionStatus.WORKING], timeout=60,
            what="task 1 finished, 2 failed, 3 running")  # fmt: skip
        seen = times()
        assert seen[1][0] == seen[1][1] and seen[2][0] == seen[2][1] and None not in (seen[1][0], seen[2][0])
        assert seen[3][0] is not None and seen[3][1] is None  # running: its claim
        client = make_client()
        claimed = seen[3][0].isoformat()
        ended = max(seen[1][0], seen[2][0]).isoformat()
        assert 3 in _ids(client, f"since={claimed}&until={claimed}")
        assert _ids(client, f"since={ended}&until={ended}") == sorted(
            [i for i in (1, 2, 3) if seen[i][0].isoformat() == ended], reverse=True)  # fmt: skip
        with Session(appdb_all.db.engine) as s:
            assert c.workers["main"].cancel(s, 3)
            s.commit()
        cancelled = times()[3]
        assert cancelled[0] == cancelled[1] and cancelled[0] >= seen[3][0]  # its end, now
    finally:
        c.stop(timeout=10)
    appdb_all.add({"id": 4})  # never claimed: cancelled, it changed then
    with Session(appdb_all.db.engine) as s:
        assert c.workers["main"].cancel(s, 4)
        s.commit()
    never = times()[4]
    assert never[0] is not None and never[0] == never[1]
    assert _ids(make_client(), "since=2999-01-01T00:00:00") == []


def test_bad_parameters_get_a_400_naming_them(make_client: ClientFactory, appdb_all: AppDb) -> None:
    _fill(appdb_all, 6)
    client = make_client()
    for query, words in [
        ("col.nope=1", "col.nope: Task has no column 'nope' to filter on (offered, the indexed ones: id, kind)"),
        ("col.action=x", "col.action: Task has no column 'action'"),
        ("col.kind=" + "x" * 21, "col.kind: longer than column kind holds (20 characters)"),
        ("col.id=abc", "col.id: 'abc' is not an integer"),
        (f"col.id.gte={2**70}", "col.id.gte: "),
        ("col.id.gte=9&col.id.lte=3", "col.id.lte: 3 is below col.id.gte (9): the range is empty"),
        ("since=soon", "since: 'soon' is not an ISO 8601 time"),
        ("status=bogus", "status: 'bogus' is not one of"),
        ("error=" + "e" * 300, "error: at most 200 characters"),
    ]:
        r = client.get(f"/api/workers/main/items?{query}", headers=AUTH)
        assert r.status_code == 400 and words in r.json()["detail"], (query, r.text)
        page = client.get(f"/workers/main?{query}")
        assert page.status_code == 400 and words.split(":")[0] in page.text, query
    table = appdb_all.coordinator.workers["main"].table
    with appdb_all.db.engine.connect() as conn:  # nothing changed
        assert conn.execute(sa.select(sa.func.count()).select_from(table).where(table.c.execution_status == "failed")).scalar() == 2


def test_the_worker_page_offers_the_indexed_columns_and_keeps_the_filter(make_client: ClientFactory,
                                                                         appdb_all: AppDb) -> None:  # fmt: skip
    _fill(appdb_all)
    client = make_client()
    page = client.get("/workers/main?status=failed&col.kind=a&error=timeout").text
    assert '<details class="finder" open>' in page
    assert 'name="col.kind" value="a"' in page and 'name="col.id.gte" value=""' in page and "col.action" not in page
    shown = [int(x) for x in __import__("re").findall(r'<tr data-id="(\d+)">', page)]
    assert shown == [27, 21, 15, 9, 3]
    # The links that act on a row come back to the filtered page.
    assert 'value="/workers/main?status=failed&amp;error=timeout&amp;col.kind=a"' in page
    assert taskapp.Task.__table__.c.kind.index
