"""A handler process that dies fails only its own item; the worker goes on with a fresh process."""

from __future__ import annotations

from pathlib import Path

from dbworker import ExecutionStatus
from tests.helpers import wait_until
from tests.integration.conftest import App


def test_exit_and_sigkill_fail_only_their_items(app: App, tmp_path: Path) -> None:
    c = app.coordinator(concurrency=3)
    go = tmp_path / "go"
    # Two long handlers share the pool with the ones that die: they are collateral to nothing.
    survivors = app.add(f"wait:{go}", f"wait:{go}")
    c.start()
    wait_until(lambda: len(app.started()) == 2, what="the long handlers to start")
    [exits] = app.add("exit:3")
    app.wait_status([exits])
    [killed] = app.add("kill")
    app.wait_status([killed])
    go.touch()
    after = app.add(*["finish"] * 5)
    app.wait_status(survivors + after, (ExecutionStatus.FINISHED,))
    exit_state, kill_state = app.state(exits), app.state(killed)
    assert exit_state is not None and kill_state is not None
    assert exit_state["execution_status"] is ExecutionStatus.FAILED
    assert "handler process died: exited with code 3" in exit_state["error"]
    assert kill_state["execution_status"] is ExecutionStatus.FAILED
    assert "killed by SIGKILL" in kill_state["error"]
    assert all(len(app.outputs(i)) == 1 for i in survivors + after)


def test_a_killed_handler_process_is_replaced(app: App) -> None:
    c = app.coordinator(concurrency=1)
    c.start()
    for _ in range(3):
        [i] = app.add("kill")
        app.wait_status([i])
    [last] = app.add("finish")
    app.wait_status([last], (ExecutionStatus.FINISHED,))
