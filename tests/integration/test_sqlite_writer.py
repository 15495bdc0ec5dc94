"""SQLite's single writer (issue 26): a handler that flushes a write and then runs on holds the
database's only write lock until dbworker commits its outcome. What holds:

- ``workers[name].cancel()`` of its item waits the busy timeout (five seconds) and then fails
  with ``WriteLockHeld``, which says why and what to do (before: a raw ``sqlite3.OperationalError:
  database is locked``); the session is rolled back and the cancel tried again once the
  handler has returned.
- The lease renewal meanwhile fails (an error, not a lost claim); no one else can take the item
  either (a claim writes too), so the handler's commit still finds its claim and keeps it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from dbworker.observe import Observer
from dbworker.workers import WriteLockHeld
from tests.helpers import wait_until
from tests.integration.conftest import App


class Renewals(Observer):
    def __init__(self) -> None:
        self.results: list[str] = []

    def renewed(self, worker: str, *, result: str, count: int) -> None:
        self.results.append(result)


def test_cancel_while_a_handler_holds_the_write_lock_says_why_and_what_to_do(app: App, tmp_path: Path) -> None:
    if app.db.backend != "sqlite":
        pytest.skip("SQLite's single writer")
    go = tmp_path / "go"
    c = app.coordinator(concurrency=1, lease_seconds=1.5)
    renewals = Renewals()
    c.add_observer(renewals)
    [item] = app.add(f"flushwait:{go}")
    c.start()
    wait_until(lambda: app.started(item), what="the handler to start")
    wait_until(lambda: "error" in renewals.results, what="a lease renewal to meet the held write lock")
    with Session(app.db.engine) as session:
        with pytest.raises(WriteLockHeld) as raised:
            c.workers["items"].cancel(session, item)
        session.rollback()
    message = str(raised.value)
    assert f"cannot cancel item {item} of worker 'items' now: SQLite's only write lock" in message
    assert "cancel again once that handler returns" in message
    assert "database is locked" in str(raised.value.__cause__)
    go.touch()
    app.wait_status([item], (ExecutionStatus.FINISHED,))  # its claim held: nothing else could write
    assert app.item(item).runs == 1
    with Session(app.db.engine) as session:
        assert c.workers["items"].cancel(session, item) is False  # finished: nothing to cancel
        session.commit()
