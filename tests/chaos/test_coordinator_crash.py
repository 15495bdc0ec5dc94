"""A coordinator killed mid-handler: orphans exit, others take over after the lease, one commit each."""

from __future__ import annotations

import signal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from tests.apps import basic
from tests.chaos.conftest import Processes
from tests.helpers import descendants_of, kill, pid_alive, wait_until
from tests.integration.conftest import App


@pytest.mark.slow
def test_killed_coordinator_items_are_taken_over_and_committed_once(app: App, processes: Processes) -> None:
    c = app.coordinator(lease_seconds=2)  # creates the tables; started later as the survivor
    ids = app.add("dbwait", "dbwait", "dbwait")
    victim = processes.coordinator(app.db.url, "--lease", "2", "--concurrency", "3")
    wait_until(lambda: len(app.started()) == 3, what="three handlers running in the victim")
    handler_pids = {s.pid for s in app.started()}
    assert handler_pids <= set(descendants_of(victim.pid))
    kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    # Orphaned handler processes notice and exit by themselves.
    wait_until(lambda: not any(pid_alive(p) for p in handler_pids), what="orphaned handlers to exit")
    for i in ids:
        assert app.status(i) is ExecutionStatus.WORKING  # recorded status unchanged by the death
    for i in ids:
        app.update_item(i, release=True)
    c.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,))
    with Session(app.db.engine) as s:
        for i in ids:
            outputs = s.scalars(sa.select(basic.Output).where(basic.Output.item_id == i)).all()
            assert len(outputs) == 1
            assert outputs[0].pid not in handler_pids  # committed by the survivor


def test_sigterm_to_the_process_group_does_not_reach_handlers(app: App, processes: Processes) -> None:
    app.coordinator()
    [i] = app.add("dbwait")
    proc = processes.coordinator(app.db.url, "--concurrency", "1")
    wait_until(lambda: app.started(i), what="the handler to start")
    [handler] = [s.pid for s in app.started(i)]
    kill(handler, signal.SIGTERM)
    kill(handler, signal.SIGINT)
    app.update_item(i, release=True)
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    assert app.outputs(i)[0].pid == handler  # the same process finished the item
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
