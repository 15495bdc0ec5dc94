"""Acting on every item a filter matches (issue 30): retry, cancel and run again, with a
confirmation stating the count, in bounded batches, each leaving an audit line shown on the
worker page and in the API."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from dbworker.console import sets
from tests.acceptance.conftest import AppDb
from tests.console.conftest import ClientFactory, csrf_of
from tests.console.test_item_filters import AUTH, _fill


def _statuses(appdb: AppDb) -> dict[int, tuple[str, str | None]]:
    table = appdb.coordinator.workers["main"].table
    with appdb.db.engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.source_id, table.c.execution_status, table.c.error)).all()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_actions_on_a_filter_change_what_it_matches_in_batches_and_are_audited(
    make_client: ClientFactory, appdb_all: AppDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(appdb_all)
    table = appdb_all.coordinator.workers["main"].table
    with appdb_all.db.engine.begin() as conn:
        conn.execute(sa.update(table).where(table.c.source_id == 1).values(execution_status="working", claim_token="t"))
        conn.execute(sa.update(table).where(table.c.source_id == 2).values(execution_status="unfinished"))
    monkeypatch.setattr(sets, "BATCH", 2)  # several batches for a handful of items
    client = make_client()
    url = "/api/workers/main/act/retry?col.kind=a"
    assert client.post(url + "&dry_run=true", headers=AUTH).json()["matching"] == 5
    assert _statuses(appdb_all)[3] == ("failed", "Timeout talking to 10.0.0.3")  # a dry run changes nothing
    assert client.post(url, headers=AUTH).json()["changed"] == 5
    after = _statuses(appdb_all)
    assert {i for i, (s, _) in after.items() if s == "unfinished"} == {2, 3, 9, 15, 21, 27}
    assert all(after[i] == ("unfinished", None) for i in (3, 9, 15, 21, 27))
    assert all(after[i][0] == "failed" for i in (6, 12, 18, 24, 30))  # kind b: not matched
    r = client.post("/api/workers/main/act/cancel?col.id.lte=2", headers=AUTH)
    assert r.json()["changed"] == 2 and _statuses(appdb_all)[1] == ("failed", "cancelled") == _statuses(appdb_all)[2]
    r = client.post("/api/workers/main/act/run-again?col.kind=b&status=finished", headers=AUTH)
    assert r.json()["changed"] == 9  # 4, 8, 10, 14, 16, 20, 22, 26, 28
    assert _statuses(appdb_all)[28] == ("unfinished", None) and _statuses(appdb_all)[29][0] == "finished"
    lines = client.get("/api/workers/main/actions", headers=AUTH).json()["actions"]
    assert [(a["who"], a["action"], a["filter"], a["count"]) for a in lines] == [
        ("alice", "run-again", "status=finished&col.kind=b", 9),
        ("alice", "cancel", "col.id.lte=2", 2),
        ("alice", "retry", "col.kind=a", 5),
    ]
    page = client.get("/workers/main").text
    assert "Actions on sets of items" in page and "<code>status=finished&amp;col.kind=b</code>" in page


def test_the_page_confirms_with_the_count_then_acts(make_client: ClientFactory, appdb_all: AppDb) -> None:
    _fill(appdb_all, 12)
    client = make_client()
    listed = client.get("/workers/main?status=failed").text
    assert 'href="/workers/main/act/retry?status=failed"' in listed
    confirm = client.get("/workers/main/act/retry?status=failed")
    assert re.search(r"This changes <b>4</b> item\(s\)", confirm.text), confirm.text
    assert 'name="status" value="failed"' in confirm.text
    assert "No item matches" in client.get("/workers/main/act/cancel?status=failed").text  # cancel: not failed ones
    r = client.post("/workers/main/act/retry", data={"csrf": csrf_of(confirm.text), "status": "failed"},
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and r.headers["location"] == "/workers/main?status=failed&done=acted"
    assert not [i for i, (s, _) in _statuses(appdb_all).items() if s == "failed"]
    # Refused before anything changes: a bad filter, an unknown action, no CSRF value, read-only.
    before = _statuses(appdb_all)
    assert client.post("/api/workers/main/act/run-again?col.nope=1", headers=AUTH).status_code == 400
    assert client.post("/api/workers/main/act/delete", headers=AUTH).status_code == 404
    assert client.post("/workers/main/act/run-again", data={"status": "finished"}).status_code == 403
    ro = make_client(read_only=True)
    assert ro.post("/api/workers/main/act/run-again", headers=AUTH).status_code == 403
    assert ro.get("/workers/main/act/run-again").status_code == 403
    assert _statuses(appdb_all) == before
