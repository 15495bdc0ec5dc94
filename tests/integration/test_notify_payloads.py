"""Wake-up payloads from anyone (issue 26): any role allowed to connect to PostgreSQL may
``NOTIFY dbworker``. Payloads that name a key not of the key's type, keys that are not JSON,
or nothing registered here are ignored, counted and logged at most once a minute; none
reaches a claim's SQL (before, ``1e5`` for an integer key made every claim by key fail as a
database error), and the worker goes on claiming.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa

from dbworker import ExecutionStatus
from dbworker.observe import Observer
from tests.helpers import wait_until
from tests.integration.conftest import App

MALFORMED = [
    'rows:items ["1e5"]',  # not an integer
    'rows:items ["99999999999"]',  # beyond items.id's integer range
    "rows:items [oops",  # not JSON
    "again:items 1e5",
    "done:items ' OR 1=1",
]
FOREIGN = ["hello", "again:someone_elses 1"]  # (other tests' coordinators send foreign ones too)


class Seen(Observer):
    def __init__(self) -> None:
        self.ignored: list[str] = []
        self.db_errors: list[str] = []

    def notification_ignored(self, *, reason: str) -> None:
        self.ignored.append(reason)

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        self.db_errors.append(f"{operation}: {error!r}")


def test_malformed_and_foreign_notifications_are_ignored_counted_and_logged_once_a_minute(app: App, caplog: Any) -> None:
    if app.db.backend != "postgresql":
        pytest.skip("PostgreSQL's NOTIFY: elsewhere wake-ups come from dbworker's own change table")
    caplog.set_level(logging.INFO, logger="dbworker")
    c = app.coordinator()
    seen = Seen()
    c.add_observer(seen)
    [first] = app.add("finish")
    c.start()
    app.wait_status([first], (ExecutionStatus.FINISHED,))
    with app.db.engine.begin() as conn:  # as any role could, one notification each
        for payload in MALFORMED + FOREIGN:
            conn.execute(sa.select(sa.func.pg_notify("dbworker", payload)))
    wait_until(
        lambda: seen.ignored.count("malformed") == len(MALFORMED) and seen.ignored.count("foreign") >= len(FOREIGN),
        what=f"every payload to be ignored ({seen.ignored})",
    )
    [after] = app.add("finish")  # the worker goes on claiming, woken by its table's trigger or poll
    app.wait_status([after], (ExecutionStatus.FINISHED,))
    assert seen.db_errors == []
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "ignored a" in r.getMessage()]
    assert len(warned) == 1, warned  # malformed ones: at most once a minute
    assert "malformed" in warned[0] and "dbworker_notifications_ignored_total" in warned[0]
