"""An eligible that returns something other than a select() (issue 26): one error naming the
worker and the fix, logged once however many polls meet it, and no database error counted
(before: a database error logged and counted at every poll). Once it returns a select()
again, the worker claims.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa

from dbworker import ExecutionStatus
from dbworker.observe import Observer
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App

CALLS: list[bool] = []  # one entry per call; True once the application is fixed
FIXED: list[bool] = []


def _text_then_select() -> Any:
    CALLS.append(bool(FIXED))
    if FIXED:
        return sa.select(basic.Item)
    return sa.text("SELECT id FROM items")


class DbErrors(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        self.seen.append(f"{operation}: {error!r}")


def test_an_eligible_that_is_not_a_select_is_one_clear_error(app: App, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="dbworker")
    CALLS.clear()
    FIXED.clear()
    c = app.coordinator(eligible=_text_then_select)
    errors = DbErrors()
    c.add_observer(errors)
    [item] = app.add("finish")
    c.start()
    wait_until(lambda: CALLS.count(False) >= 4, what="several claims to call eligible()")
    assert app.status(item) is None
    said = [r for r in caplog.records if r.name == "dbworker" and r.levelno >= logging.WARNING]
    assert [r.levelno for r in said] == [logging.ERROR], [r.getMessage() for r in said]
    message = said[0].getMessage()
    assert message.startswith("dbworker worker items: eligible() returned TextClause: it must return a select()")
    assert "sqlalchemy.select(Model)" in message and "until eligible= is fixed" in message
    assert errors.seen == []
    FIXED.append(True)
    app.wait_status([item], (ExecutionStatus.FINISHED,))
