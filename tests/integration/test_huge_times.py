"""A stored time Python cannot hold (issue 26): a ``not_before`` in the year 275817 (stored by
an earlier release's ``Unfinished(after=1e13)``, or by hand) made the loop's lookup of
waiting items fail every second, and ``state()`` and the console raise. Now it is never due
in practice: the lookup leaves it out, ``state()`` and the console's pages read it as
9999-12-31 23:59:59.999999, and no database error is logged. PostgreSQL's timestamp and
SQLite's text hold such a year; MySQL/MariaDB's DATETIME stops at 9999 itself.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from dbworker import ExecutionStatus
from dbworker.observe import Observer
from dbworker.sql import attempts, browse, times
from tests.helpers import wait_until
from tests.integration.conftest import App

HUGE = "275817-01-01 00:00:00.000000"


class Trips(Observer):
    def __init__(self) -> None:
        self.db_errors: list[str] = []
        self.heartbeats = 0

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        self.db_errors.append(f"{operation}: {error!r}")

    def heartbeat(self, worker: str, *, timestamp: float) -> None:
        self.heartbeats += 1


def test_a_not_before_past_the_year_9999_is_read_and_never_breaks_the_loop(app: App) -> None:
    if app.db.backend == "mariadb":
        pytest.skip("MariaDB's DATETIME cannot hold a year past 9999")
    c = app.coordinator()
    trips = Trips()
    c.add_observer(trips)
    [waiting, other] = app.add("finish", "finish")
    table = c.workers["items"].table
    with app.db.engine.begin() as conn:  # as an earlier release could have stored it
        conn.execute(sa.insert(table).values(source_id=waiting, execution_status="unfinished", attempts=1))
        conn.execute(sa.text(f"UPDATE {table.name} SET not_before = :at WHERE source_id = :id"),
                     {"at": HUGE, "id": waiting})  # fmt: skip
    c.start()
    app.wait_status([other], (ExecutionStatus.FINISHED,))
    seen = trips.heartbeats
    wait_until(lambda: trips.heartbeats >= seen + 3, what="more polls and lookups")
    state = app.state(waiting)
    assert state is not None and state["execution_status"] is ExecutionStatus.UNFINISHED
    assert state["not_before"] == times.LATEST
    finished = app.state(other)
    assert finished is not None and finished["not_before"] is None  # a NULL stays NULL
    with app.db.engine.connect() as conn:
        rows = browse.page(conn, table).rows  # the console's list
        assert [r["not_before"] for r in rows if r["source_id"] == waiting] == [times.LATEST]
        conn.rollback()
        assert waiting not in [sid for sid, _ in attempts.due(conn, table, 64)]
    assert trips.db_errors == []
    assert app.status(waiting) is ExecutionStatus.UNFINISHED  # never due
