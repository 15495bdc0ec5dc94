"""Leases: renewed while a handler runs; one claim at a time per item across coordinators."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App


@pytest.mark.slow
def test_a_running_handler_keeps_its_lease(app: App) -> None:
    first = app.coordinator(lease_seconds=3)
    [i] = app.add("dbwait")
    first.start()
    wait_until(lambda: app.started(i), what="the handler to start")
    token = app.state(i)["claim_token"]  # type: ignore[index]
    second = app.coordinator(lease_seconds=3)
    second.start()
    # Several leases long: the second coordinator finishes other work but never takes item i.
    for _ in range(6):
        [other] = app.add("sleep:1")
        app.wait_status([other], (ExecutionStatus.FINISHED,))
    state = app.state(i)
    assert state is not None and state["claim_token"] == token
    assert state["execution_status"] is ExecutionStatus.WORKING
    app.update_item(i, release=True)
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    assert len(app.started(i)) == 1 and len(app.outputs(i)) == 1


def test_two_coordinators_never_run_one_item_twice(app: App) -> None:
    coordinators = [app.coordinator(concurrency=3) for _ in range(2)]
    ids = app.add(*["sleep:0.01"] * 60)
    for c in coordinators:
        c.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,), timeout=120)
    started = app.started()
    assert sorted(s.item_id for s in started) == sorted(ids)  # each started exactly once
    assert len(app.outputs()) == len(ids)
    with Session(app.db.engine) as s:
        assert s.scalar(sa.select(sa.func.max(basic.Item.runs))) == 1


def test_renewing_a_claim_whose_item_just_ended_does_not_report_it_lost(app: App) -> None:
    """The handler may commit between the lease keeper's look at running items and its renew."""
    from dbworker.sql import claims, items

    c = app.coordinator()
    table, key = c.workers["items"].table, basic.Item.__table__.c.id
    ended, taken = app.add("finish", "finish")
    with app.db.engine.connect() as conn:
        got = claims.claim(conn, table=table, key=key, eligible=None, limit=2, lease_seconds=30).taken
        mine = {g.source_id: g for g in got}
        assert set(mine) == {ended, taken}
        assert items.finish(conn, table, mine[ended], ExecutionStatus.FINISHED)
        conn.commit()
        # Another process took `taken` over (as after an expired lease): a new token holds it.
        conn.execute(sa.update(table).where(table.c.source_id == taken).values(claim_token="another"))
        conn.commit()
        lost = items.renew(conn, table, list(got), lease_seconds=30)
    assert [g.source_id for g in lost] == [taken]
