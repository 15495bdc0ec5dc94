"""Each attempt keeps the log records its handler wrote (issue 30): in the child process, in
memory until the history row is written with the outcome, so they survive the rollback of a
failure; bounded and masked; ``history_logs=False`` keeps none."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus, Retry, attemptlogs, testing
from dbworker.pod import cli
from dbworker.sql import history, upgrade
from tests.apps import basic
from tests.integration.conftest import App


def _logs(app: App, item_id: int) -> list[list[str]]:
    state = app.state(item_id)
    assert state is not None
    return [[r["message"] for r in a["logs"]] for a in state["history"]]


def test_records_are_kept_with_their_attempt_masked_and_bounded(app: App) -> None:
    c = app.coordinator()
    assert c.history_logs is True
    [few, many, failing] = app.add("log:2", f"log:{attemptlogs.RECORDS + 5}", "logfail:1")
    c.start()
    app.wait_status([few, many, failing])
    [[one, two]] = _logs(app, few)
    assert one == f"item {few} record 1 via postgresql://bob:***@db/x" and two.startswith(f"item {few} record 2")
    state = app.state(few)
    assert state is not None
    record = state["history"][0]["logs"][0]
    assert (record["level"], record["logger"]) == ("WARNING", "tests.items") and record["at"][:2] == "20"
    [kept] = _logs(app, many)
    assert len(kept) == attemptlogs.RECORDS + 1 and kept[0].startswith("5 earlier log record(s)")
    assert kept[-1].startswith(f"item {many} record {attemptlogs.RECORDS + 5} ")
    # The failure rolled the handler's writes back; its records are in the failed attempt.
    state = app.state(failing)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    [attempt] = state["history"]
    assert attempt["outcome"] == "failed" and [r["message"] for r in attempt["logs"]] == [
        f"item {failing} record 1 via postgresql://bob:***@db/x"
    ]
    with Session(app.db.engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(basic.Output).where(basic.Output.item_id == failing)) == 0


def test_each_attempt_keeps_only_its_own_records(app: App) -> None:
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0.01, backoff=1.0))
    [i] = app.add("logfail:1")
    c.start()
    app.wait_status([i])
    assert _logs(app, i) == [[f"item {i} record 1 via postgresql://bob:***@db/x"]] * 3


def test_history_logs_off_keeps_no_records(app: App) -> None:
    c = app.coordinator(history_logs=False)
    [i] = app.add("log:3")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    assert _logs(app, i) == [[]]
    table = history.history_table(c.workers["items"].table)
    with app.db.engine.connect() as conn:
        assert conn.execute(sa.select(table.c.logs)).scalars().all() == [None]


def test_drain_keeps_the_records_too(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("logfail:2")
    assert testing.drain(c) == {"items": 1}
    assert [len(x) for x in _logs(app, i)] == [2]


def test_the_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="history_logs must be True or False"):
        basic.build("sqlite://", app_tables=False, work_tables=False, history_logs="yes")


def test_migrate_adds_the_logs_column_to_an_existing_history_table(app: App) -> None:
    c = app.coordinator()
    table = history.history_table(c.workers["items"].table)
    with app.db.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {table.name} DROP COLUMN logs")
    assert upgrade.lacking_columns(app.db.engine, [table]) == {table.name: ["logs"]}
    with pytest.raises(RuntimeError, match=f"{table.name} lacks logs"):
        c.start()
    assert f"added column {table.name}.logs" in c.create_worker_tables()
    [i] = app.add("log:1")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    assert [len(x) for x in _logs(app, i)] == [1]


def test_inspect_item_prints_each_attempts_records(app: App, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    c = app.coordinator()
    [i] = app.add("logfail:2")
    assert testing.drain(c) == {"items": 1}
    monkeypatch.setattr(basic, "inspected", c, raising=False)
    assert cli.main(["inspect", "tests.apps.basic:inspected", "--worker", "items", "--item", str(i)]) == 0
    out = capsys.readouterr().out
    assert f"WARNING tests.items: item {i} record 2 via postgresql://bob:***@db/x" in out
    assert "hunter22" not in out


def test_history_attempts_zero_records_no_attempt(app: App) -> None:
    c = app.coordinator(history_attempts=0, timeout=1.0)
    [ok, failing, crash] = app.add("log:1", "logfail:1", "kill")
    c.start()
    app.wait_status([ok, failing, crash])
    assert [app.status(i) for i in (ok, failing, crash)] == [ExecutionStatus.FINISHED, ExecutionStatus.FAILED,
                                                            ExecutionStatus.FAILED]  # fmt: skip
    assert _logs(app, ok) == _logs(app, failing) == _logs(app, crash) == []
    table = history.history_table(c.workers["items"].table)
    with app.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
