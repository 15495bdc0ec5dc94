"""Numbers at the edge, end to end: a handler's out-of-bound ``Unfinished(after=...)`` fails
its item once, naming the bound, instead of running again and again; ``/healthz`` turns red
when the lease keeper's thread dies, whatever killed it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dbworker import ExecutionStatus, leases
from dbworker.pod import health
from tests.helpers import wait_until
from tests.integration.conftest import App


def test_an_unfinished_after_past_the_bound_fails_the_item_once(app: App) -> None:
    c = app.coordinator()
    [item] = app.add("later:1e13")  # Unfinished(after=1e13) on its first run: 317,000 years
    c.start()
    app.wait_status([item])
    state = app.state(item)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert "Unfinished(after=...) must be at most 3.1536e+08 seconds (10 years)" in state["error"]
    assert len(app.started(item)) == 1  # never run again


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_turns_red_when_the_lease_keeper_dies(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    def dies(self: Any) -> None:
        raise OverflowError("timeout value is too large")  # what an unbounded lease once did

    monkeypatch.setattr(leases.LeaseKeeper, "_run", dies)
    c = app.coordinator()
    tracker = health.HealthTracker(c.dead_threads)
    c.add_observer(tracker)
    c.start()
    tracker.started(["items"])
    def red() -> health.Verdict | None:
        verdict = health.liveness(tracker.snapshot(), now=time.time(), bound=60)
        return None if verdict.ok else verdict

    verdict = wait_until(red, what="/healthz to turn red")
    assert verdict.reason == "lease keeper is no longer running"
    assert not health.readiness(tracker.snapshot()).ok
    c.stop()
    assert c.dead_threads() == []  # stopped: nothing is expected to run
