"""Lifecycle controls on real servers and real handler processes: retries, timeouts,
``Unfinished(after=)``, cancel, and ``dbworker.testing.drain``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus, Retry, testing
from dbworker.sql import claims, items
from tests.apps import basic
from tests.helpers import pid_alive, wait_until
from tests.integration.conftest import App

FAILED = (ExecutionStatus.FAILED,)
FINISHED = (ExecutionStatus.FINISHED,)
SLOW = {"poll_seconds": 120, "max_poll_seconds": 120}  # only wake-ups and due times find items


def starts(app: App, item_id: int) -> list[float]:
    return sorted(s.at for s in app.started(item_id))


def test_a_handler_failing_twice_then_succeeding_is_retried_after_the_delays(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0.2), **SLOW)
    [i] = app.add("flaky:3")
    c.start()
    app.wait_status([i], FINISHED, timeout=60)
    state = app.state(i)
    assert state is not None and state["attempts"] == 3
    first, second, third = starts(app, i)
    assert second - first >= 0.2 and third - second >= 0.4  # delay, then delay * backoff
    assert state["not_before"] is None and state["error"] is None


def test_a_handler_that_always_fails_fails_after_exactly_max_attempts_with_the_error_text(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0.05), **SLOW)
    [i] = app.add("fail")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    state = app.state(i)
    assert state is not None
    assert state["attempts"] == 3 and len(app.outputs(i)) == 0
    # The exception's text, as 0.0.1 recorded it; the traceback beside it.
    assert state["error"] == f"item {i} asked to fail"
    assert "Traceback" in state["traceback"] and "RuntimeError" in state["traceback"]


def test_an_exception_outside_on_fails_at_once(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=5, on=(OSError,)), **SLOW)
    [i] = app.add("value")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    state = app.state(i)
    assert state is not None and state["attempts"] == 1
    assert state["error"] == f"item {i} has a bad value"
    assert len(starts(app, i)) == 1


def test_a_handler_that_sigkills_its_own_process_is_retried(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=2, delay=0.1), **SLOW)
    [i] = app.add("killonce")
    c.start()
    app.wait_status([i], FINISHED, timeout=60)
    state = app.state(i)
    assert state is not None and state["attempts"] == 2
    assert len(starts(app, i)) == 2


def test_without_retry_a_failure_is_final_as_in_the_contract(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("flaky:2")
    c.start()
    app.wait_status([i], FAILED)
    state = app.state(i)
    assert state is not None and state["attempts"] == 1 and state["error"] == f"item {i} is flaky"


def test_timeout_ends_a_handler_that_sleeps_forever_and_ignores_sigterm(app: App) -> None:
    c = app.coordinator(timeout=1, concurrency=1)
    [i, after] = app.add("hang", "finish")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    state = app.state(i)
    assert state is not None and state["error"] == "handler timed out after 1 s"
    [pid] = [s.pid for s in app.started(i)]
    wait_until(lambda: not pid_alive(pid), what="the timed-out handler process to end")
    app.wait_status([after], FINISHED)  # its slot was replaced


def test_a_timed_out_attempt_is_retried_when_retry_allows(app: App) -> None:
    c = app.coordinator(timeout=1, retry=Retry(max_attempts=2, delay=0.1), concurrency=1)
    [i] = app.add("hang")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    state = app.state(i)
    assert state is not None and state["attempts"] == 2 and len(starts(app, i)) == 2


def test_unfinished_after_runs_again_after_the_delay_and_not_before(app: App) -> None:
    c = app.coordinator(**SLOW)
    [i] = app.add("later:2")
    c.start()
    wait_until(lambda: app.status(i) is ExecutionStatus.UNFINISHED, what="the first step")
    state = app.state(i)
    assert state is not None and state["not_before"] is not None and state["attempts"] == 0
    app.wait_status([i], FINISHED, timeout=30)
    first, second = starts(app, i)
    assert second - first >= 2.0
    assert second - first < 30.0  # picked up when due, not at a 120 s poll


def test_cancel_of_a_waiting_item_fails_it_and_it_never_runs(app: App) -> None:
    c = app.coordinator()
    [waiting, other] = app.add("finish", "finish")
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, waiting) is True
        s.commit()
    c.start()
    app.wait_status([other], FINISHED)
    state = app.state(waiting)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["error"] == "cancelled" and app.outputs(waiting) == []
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, waiting) is False  # failed already
        assert c.workers["items"].reset_failed(s, waiting) is True  # brings it back
        s.commit()
    app.wait_status([waiting], FINISHED)


def test_cancel_of_a_running_item_ends_its_handler_and_rolls_its_writes_back(app: App) -> None:
    c = app.coordinator(lease_seconds=3)
    [i] = app.add("dbwait")
    c.start()
    wait_until(lambda: app.started(i), what="the handler to start")
    [pid] = [s.pid for s in app.started(i)]
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, i) is True
        s.commit()
    wait_until(lambda: not pid_alive(pid), timeout=30, what="the cancelled handler's process to end")
    app.update_item(i, release=True)
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["error"] == "cancelled"
    assert app.outputs(i) == [] and app.item(i).runs == 0


def _chain(app: App) -> Coordinator:
    c = basic.build(app.db.url, **{"poll_seconds": 0.05, "max_poll_seconds": 0.5})
    app.coordinators.append(c)

    def after_items() -> sa.Select[Any]:
        done = c.has_execution_status(worker="items", source_id=basic.Item.id, statuses=[ExecutionStatus.FINISHED])
        return sa.select(basic.Item).where(done)

    c.transactional_worker(name="then", source=basic.Item, eligible=after_items)(basic.handle_then)
    c.create_worker_tables()
    return c


def test_drain_runs_a_dependency_chain_in_the_calling_process(app: App) -> None:
    c = _chain(app)
    ids = app.add("finish", "finish", "fail")
    ran = testing.drain(c)
    assert ran == {"items": 3, "then": 2}
    with Session(app.db.engine) as s:
        statuses = {w: [c.execution_status(s, worker=w, source_id=i) for i in ids] for w in ("items", "then")}
    assert statuses["items"] == [ExecutionStatus.FINISHED, ExecutionStatus.FINISHED, ExecutionStatus.FAILED]
    assert statuses["then"] == [ExecutionStatus.FINISHED, ExecutionStatus.FINISHED, None]
    assert {o.pid for o in app.outputs()} == {os.getpid()}  # no child process ran anything


def test_drain_honours_retry_delays_and_unfinished_after(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=3, delay=60))
    [flaky, later] = app.add("flaky:2", "later:60")
    assert testing.drain(c) == {"items": 2}  # one attempt each; the rest is not due
    assert app.status(flaky) is ExecutionStatus.UNFINISHED and app.status(later) is ExecutionStatus.UNFINISHED
    assert testing.drain(c) == {"items": 0}
    with pytest.raises(KeyError, match="unknown worker 'nope'"):
        testing.drain(c, workers=["nope"])


def test_a_claim_given_back_before_its_handler_started_does_not_count_as_an_attempt(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("finish")
    w = c.workers["items"]
    for started, attempts in ((False, 0), (True, 1)):
        with app.db.engine.connect() as conn:
            [taken] = claims.claim(conn, table=w.table, key=basic.Item.__table__.c.id, eligible=None,
                                   limit=1, lease_seconds=30).taken  # fmt: skip
            assert items.give_back(conn, w.table, taken, started=started)
        state = app.state(i)
        assert state is not None and state["attempts"] == attempts
        assert state["execution_status"] is ExecutionStatus.UNFINISHED


def test_a_connection_error_the_handler_raises_is_a_failed_attempt(app: App) -> None:
    # Not the database's: it counts against max_attempts instead of being given back forever.
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0.05), **SLOW)
    [i] = app.add("refused")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    state = app.state(i)
    assert state is not None and state["attempts"] == 3 and len(starts(app, i)) == 3
    assert state["error"] == f"item {i}: connection refused"


def test_a_waiting_item_is_picked_up_on_time_by_a_coordinator_that_did_not_make_it_wait(app: App) -> None:
    first = app.coordinator(**SLOW)
    [i] = app.add("later:3")
    first.start()
    wait_until(lambda: app.status(i) is ExecutionStatus.UNFINISHED, what="the first step")
    first.stop()
    second = app.coordinator(**SLOW)
    second.start()
    app.wait_status([i], FINISHED, timeout=30)
    one, two = starts(app, i)
    assert 3.0 <= two - one < 30.0  # when due, not at the 120 s poll (a new coordinator starts)


def test_taking_over_the_last_allowed_attempt_fails_the_item_without_running_it(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=1))
    [i] = app.add("finish")
    table = c.workers["items"].table
    with app.db.engine.begin() as conn:  # its only attempt's process died with the claim
        conn.execute(sa.insert(table).values(source_id=i, execution_status="working", attempts=1,
                                             claim_token="dead", lease_expires_at=None))  # fmt: skip
    c.start()
    app.wait_status([i], FAILED)
    state = app.state(i)
    assert state is not None and "last allowed attempt" in state["error"]
    assert app.outputs(i) == []


def test_cancel_of_an_id_with_no_source_row_cancels_nothing(app: App) -> None:
    c = app.coordinator()
    with Session(app.db.engine) as s:
        assert c.workers["items"].cancel(s, 424242) is False
        s.commit()


def test_a_failed_item_reset_and_then_unfinished_runs_its_next_step_at_once(app: App) -> None:
    # It failed here, so its key is among the loop's recently ended; its Unfinished after the
    # reset is still claimed by key, not left to the next wrap (at the 120 s poll here).
    c = app.coordinator(**SLOW)
    [i] = app.add("fail")
    c.start()
    app.wait_status([i], FAILED, timeout=60)
    app.update_item(i, action="unfinished:3")
    with Session(app.db.engine) as s:
        assert c.workers["items"].reset_failed(s, i) is True
        s.commit()
    app.wait_status([i], FINISHED, timeout=30)
    assert len(app.outputs(i)) == 3
