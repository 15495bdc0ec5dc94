"""Handler outcomes: Finished, Unfinished, raised errors, forbidden commits, wrong returns, lost rows."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus, Retry, child, messages
from dbworker.sql import claims, dialects, tables
from tests.apps import basic
from tests.integration.conftest import App


def test_finished_commits_the_handler_writes_with_the_status(app: App) -> None:
    c = app.coordinator()
    ids = app.add("finish", "finish", "finish")
    assert app.status(ids[0]) is None
    c.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,))
    for i in ids:
        assert app.item(i).runs == 1
        assert len(app.outputs(i)) == 1
        state = app.state(i)
        assert state is not None
        assert state["error"] is None and state["lease_expires_at"] is None


def test_unfinished_is_called_again_until_finished(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("unfinished:3")
    c.start()
    app.wait_status([i], (ExecutionStatus.FINISHED,))
    assert app.item(i).runs == 3
    assert sorted(o.run for o in app.outputs(i)) == [1, 2, 3]


def test_a_raising_handler_fails_the_item_and_rolls_back_its_writes(app: App) -> None:
    c = app.coordinator()
    [bad, good] = app.add("fail", "finish")
    c.start()
    app.wait_status([bad, good])
    assert app.status(bad) is ExecutionStatus.FAILED and app.status(good) is ExecutionStatus.FINISHED
    state = app.state(bad)
    assert state is not None and "asked to fail" in state["error"]
    assert app.item(bad).runs == 0 and app.outputs(bad) == []


def test_failed_items_are_not_retried_until_reset(app: App) -> None:
    c = app.coordinator()
    [bad] = app.add("fail")
    c.start()
    app.wait_status([bad])
    app.update_item(bad, action="finish")
    [later] = app.add("finish")
    app.wait_status([later])
    assert app.status(bad) is ExecutionStatus.FAILED  # the loop went on, the failure stays
    with Session(app.db.engine) as s:
        assert c.workers["items"].reset_failed(s, bad) is True
        s.commit()
    with Session(app.db.engine) as s:
        assert c.workers["items"].reset_failed(s, later) is False  # not failed: no change
    app.wait_status([bad], (ExecutionStatus.FINISHED,))
    assert app.item(bad).runs == 1


def test_handler_commit_is_an_error(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("commit")
    c.start()
    app.wait_status([i])
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert "dbworker owns the commit" in state["error"]
    assert app.outputs(i) == []


def test_a_handler_commit_statement_fails_the_item_and_says_what_is_kept(app: App) -> None:
    # session.execute(text("COMMIT")) passes the commit guard: seen as the end of dbworker's
    # transaction, the item fails (no retry), and the error says the writes before it stay.
    c = app.coordinator(retry=Retry(max_attempts=3, delay=0))
    [i, after] = app.add("sqlcommit", "finish")
    c.start()
    app.wait_status([i, after])
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["attempts"] == 1
    assert "ended dbworker's transaction itself ('COMMIT')" in state["error"]
    assert "cannot be undone" in state["error"]
    # Its first writes (runs += 1, the run-0 output) were committed by its own COMMIT and are
    # kept; the output it wrote after it (run 1) is rolled back with the failure.
    assert [o.run for o in app.outputs(i)] == [0]
    assert app.item(i).runs == 1
    assert app.status(after) is ExecutionStatus.FINISHED


def test_returning_anything_else_is_an_error(app: App) -> None:
    c = app.coordinator()
    [i] = app.add("bad")
    c.start()
    app.wait_status([i])
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert "must return Finished() or Unfinished()" in state["error"]


def test_a_vanished_source_row_fails_the_item(app: App) -> None:
    c = app.coordinator()
    [victim] = app.add("finish")
    table = c.workers["items"].table
    with app.db.engine.connect() as conn:
        taken = claims.take(conn, table, victim, caps=dialects.of(conn), lease_seconds=30)
        conn.commit()
    assert taken is not None
    # The row vanishes between claim and load (foreign key bypassed, as an application's own
    # cleanup might); the handler process finds nothing to load.
    with app.db.engine.connect() as conn:
        if app.db.backend == "postgresql":
            conn.exec_driver_sql("SET session_replication_role = replica")
        elif app.db.backend == "mariadb":
            conn.exec_driver_sql("SET foreign_key_checks = 0")
        else:  # SQLite: the delete trigger that takes the work record along, bypassed the same way
            conn.exec_driver_sql(f"DROP TRIGGER {tables.cascade_trigger_name(table.name)}")
        conn.execute(sa.delete(basic.Item).where(basic.Item.id == victim))
        if app.db.backend == "sqlite":
            conn.exec_driver_sql(tables.cascade_trigger_ddl(table))
        conn.commit()
    runner = child.Runner(child.ChildConfig("items", app.db.url, {}, basic.handle, basic.Item, 0))
    try:
        report = runner.run(taken)
    finally:
        runner.close()
    assert report.outcome == messages.FAILED and "no longer exists" in (report.error or "")
    assert app.status(victim) is ExecutionStatus.FAILED
