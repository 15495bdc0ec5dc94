"""stop(), stop(timeout) and abort(): drain, deadline, and claims given back at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from dbworker.observe import Observer
from dbworker.tuning import STOP_MARGIN_SECONDS
from tests.helpers import pid_alive, wait_until
from tests.integration.conftest import App


def _children(app: App) -> list[int]:
    return [pid for c in app.coordinators for pid in c.handler_pids()]


class Draining(Observer):
    def __init__(self) -> None:
        self.seen = threading.Event()

    def draining(self, *, draining: bool) -> None:
        if draining:
            self.seen.set()


def test_stop_waits_for_running_handlers(app: App, tmp_path: Path) -> None:
    c = app.coordinator()
    draining = Draining()
    c.add_observer(draining)
    go = tmp_path / "go"
    [i] = app.add(f"wait:{go}")
    c.start()
    # Started, not only claimed: a claimed item not started yet is given back at once.
    wait_until(lambda: app.started(i), what="the handler to start")
    stopper = threading.Thread(target=c.stop)
    stopper.start()
    assert draining.seen.wait(30)  # no loop claims any more (stop() returns once drained)
    [later] = app.add("finish")
    stopper.join(1.0)
    assert stopper.is_alive()  # still waiting for the handler
    go.touch()
    stopper.join(60)
    assert not stopper.is_alive()
    assert app.status(i) is ExecutionStatus.FINISHED
    assert app.status(later) is None  # no new claims after stop()
    wait_until(lambda: not any(pid_alive(p) for p in _children(app)), what="handler processes to exit")


# Bounds how long stop() takes: parallel workers sharing the cores would measure them instead.
@pytest.mark.serial
def test_stop_with_a_timeout_ends_handlers_and_releases_their_claims(app: App, tmp_path: Path) -> None:
    c = app.coordinator(lease_seconds=300)
    ids = app.add(f"wait:{tmp_path / 'never'}", f"wait:{tmp_path / 'never'}")
    c.start()
    wait_until(lambda: len(app.started()) == 2, what="both handlers to start")
    begun = time.monotonic()
    c.stop(timeout=1)
    assert time.monotonic() - begun < 1 + STOP_MARGIN_SECONDS
    for i in ids:
        state = app.state(i)
        assert state is not None
        assert state["execution_status"] is ExecutionStatus.UNFINISHED  # released, not failed
        assert state["claim_token"] is None and state["lease_expires_at"] is None
    assert app.outputs() == []
    # Another coordinator takes them at once, without waiting for the 300 s lease.
    (tmp_path / "never").touch()
    other = app.coordinator()
    other.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,), timeout=60)


def test_abort_releases_everything_now(app: App, tmp_path: Path) -> None:
    c = app.coordinator(lease_seconds=300)
    [i] = app.add(f"wait:{tmp_path / 'never'}")
    c.start()
    wait_until(lambda: app.started(i), what="the handler to start")
    stopper = threading.Thread(target=c.stop)  # a drain without deadline...
    stopper.start()
    begun = time.monotonic()
    c.abort()  # ...cut short, as a second SIGTERM does
    stopper.join(STOP_MARGIN_SECONDS + 5)
    assert not stopper.is_alive()
    assert time.monotonic() - begun < STOP_MARGIN_SECONDS + 5
    assert app.status(i) is ExecutionStatus.UNFINISHED


def test_stop_before_start_and_twice_is_harmless(app: App) -> None:
    c = app.coordinator()
    c.stop()
    c.start()
    c.stop(timeout=5)
    c.stop(timeout=5)
    with Session(app.db.engine) as s:
        assert c.workers["items"].counts(s)[ExecutionStatus.WORKING] == 0


def test_an_item_given_back_is_taken_at_once_by_a_pod_whose_sweep_passed_it(app: App, tmp_path: Path) -> None:
    if app.db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY exists on PostgreSQL only; other servers poll")
    go = tmp_path / "go"
    stopping = app.coordinator(concurrency=1)
    [given] = app.add(f"wait:{go}")
    stopping.start()
    wait_until(lambda: app.started(given), what="the first pod's handler to start")
    # The other pod polls and wraps only every 120 s; its first sweep passes `given` (claimed
    # by the first pod) and takes `later`, so its cursor stands beyond `given`.
    other = app.coordinator(concurrency=1, poll_seconds=120, max_poll_seconds=120)
    [later] = app.add("finish")
    other.start()
    app.wait_status([later])
    stopping.stop(timeout=0.5)  # ends the handler and gives `given` back
    go.touch()
    app.wait_status([given], (ExecutionStatus.FINISHED,), timeout=60)
