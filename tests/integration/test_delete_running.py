"""A source row deleted while its handler runs, on every database: the application's DELETE
goes through at once (nothing of the claim locks the source row or the work record against it)
and takes the work record with it; the handler's commit then finds no claim and no source row,
so its writes are rolled back and its result discarded with one line at INFO (``dbworker worker
items: the source row of item N was deleted while its handler ran; result discarded``) and an
outcome of its own, ``deleted``; no loop logs a database error or a warning, and the item never
comes back.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker.observe import Observer
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App


class Outcomes(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.db_errors: list[str] = []

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        self.seen.append(outcome)

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        self.db_errors.append(f"{operation}: {error!r}")


def test_a_row_deleted_while_its_handler_runs_is_gone_for_good(app: App, tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="dbworker")
    go = tmp_path / "go"
    c = app.coordinator(concurrency=1)
    outcomes = Outcomes()
    c.add_observer(outcomes)
    [item] = app.add(f"wait:{go}")
    c.start()
    wait_until(lambda: app.started(item), what="the handler to start")
    deleted = threading.Event()

    def delete() -> None:
        with Session(app.db.engine) as s:
            s.execute(sa.delete(basic.Item).where(basic.Item.id == item))
            s.commit()
        deleted.set()

    thread = threading.Thread(target=delete, daemon=True)
    thread.start()
    wait_until(deleted.is_set, what="the DELETE to go through while the handler runs")
    go.touch()
    wait_until(lambda: outcomes.seen, what="the handler's outcome")
    [next_item] = app.add("finish")  # the loop goes on, and may reuse the key on SQLite
    app.wait_status([next_item])
    wait_until(lambda: len(outcomes.seen) == 2, what="the next item's outcome (reported after its commit)")
    assert outcomes.seen == ["deleted", "finished"]
    assert outcomes.db_errors == []
    assert [o.item_id for o in app.outputs()] == [next_item]  # the deleted row's run left nothing
    with Session(app.db.engine) as s:
        assert list(s.scalars(sa.select(c.workers["items"].table.c.source_id))) == [next_item]
    warnings = [r for r in caplog.records if r.name == "dbworker" and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == []
    said = [r.getMessage() for r in caplog.records if r.name == "dbworker" and f"item {item} " in r.getMessage()]
    assert said == [
        f"dbworker worker items: the source row of item {item} was deleted while its handler ran; result discarded"
    ]
