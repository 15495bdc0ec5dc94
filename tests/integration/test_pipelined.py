"""Short handlers get one item handed over behind the running one: never lost, never run twice."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from dbworker import ExecutionStatus, testing
from dbworker.pool import Done, Event, Pool, Skipped
from dbworker.sql import claims
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App


def test_a_pending_item_cancelled_before_it_starts_is_skipped(app: App) -> None:
    c = app.coordinator()
    running, pending = app.add("sleep:1", "finish")
    pool = Pool(testing.child_config(c, "items"), 1)
    pool.start()
    events: list[Event] = []
    try:
        wait_until(lambda: pool.wait(0.1, [])[0] == [] and pool.idle() == 1, what="the handler process")
        with app.db.engine.connect() as conn:
            got = claims.claim(
                conn, table=c.workers["items"].table, key=basic.Item.__table__.c.id,
                eligible=None, limit=2, lease_seconds=60,
            ).taken  # fmt: skip
        first, second = sorted(got, key=lambda claim: claim.source_id)
        pool.submit(first, pipelined=False)
        pool.submit(second, pipelined=True)
        assert pool.held_claims() == [first, second] and pool.busy_claims() == [first]
        pool.cancel_pending()  # while `first` sleeps: `second` is still in the pipe

        def two_events() -> bool:
            events.extend(pool.wait(0.2, [])[0])
            return len(events) >= 2

        wait_until(two_events, what="the running item's result and the skip")
    finally:
        pool.shutdown()
    # The skip comes at once, from the process's inbox thread, while `first` still runs.
    [done] = [e for e in events if isinstance(e, Done)]
    [skipped] = [e for e in events if isinstance(e, Skipped)]
    assert done.claim == first and done.report.outcome == "finished"
    assert skipped.claim == second
    assert app.outputs(running) and not app.outputs(pending)  # the skipped item never ran


def test_an_item_pending_behind_a_crash_is_given_back_and_runs_once(app: App) -> None:
    # A lease longer than the test: only a give-back, not an expiry, lets the pending item run.
    c = app.coordinator(concurrency=1, lease_seconds=600)
    before = app.add(*["finish"] * 40)
    [killer] = app.add("kill")
    after = app.add(*["finish"] * 40)
    c.start()
    app.wait_status([*before, killer, *after], timeout=60)
    assert app.status(killer) is ExecutionStatus.FAILED
    for i in before + after:
        assert app.status(i) is ExecutionStatus.FINISHED
        assert len(app.outputs(i)) == 1, f"item {i} committed {len(app.outputs(i))} times"


def test_stop_gives_back_what_was_handed_over_but_not_started(app: App) -> None:
    first = app.coordinator(concurrency=2)
    ids = app.add(*["sleep:0.02"] * 200)
    first.start()

    def finished() -> int:
        return sum(app.status(i) is ExecutionStatus.FINISHED for i in ids)

    wait_until(lambda: finished() >= 20, what="a few items to finish")
    first.stop()
    with Session(app.db.engine) as s:
        states = {i: first.workers["items"].state(s, i) for i in ids}
    for i, state in states.items():
        status = None if state is None else state["execution_status"]
        assert status in (None, ExecutionStatus.FINISHED, ExecutionStatus.UNFINISHED), (i, state)
        assert len(app.outputs(i)) == (1 if status is ExecutionStatus.FINISHED else 0)
    second = app.coordinator(concurrency=2)
    second.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,), timeout=120)
    assert all(len(app.outputs(i)) == 1 for i in ids)


def test_no_item_waits_behind_a_long_one(app: App, tmp_path: Path) -> None:
    """Short items are handed over behind running ones; one that turns out long gives its back."""
    go = tmp_path / "go"
    c = app.coordinator(concurrency=2, lease_seconds=600)
    short = app.add(*["finish"] * 20)
    [long] = app.add(f"wait:{go}")
    more = app.add(*["finish"] * 60)
    c.start()
    # Every short item finishes while the long one still waits (it never will by itself).
    app.wait_status(short + more, (ExecutionStatus.FINISHED,), timeout=60)
    assert app.status(long) is ExecutionStatus.WORKING
    go.touch()
    app.wait_status([long], (ExecutionStatus.FINISHED,))
    assert all(len(app.outputs(i)) == 1 for i in [*short, long, *more])
