"""Left-behind rows of the model test, reduced: while every slot is busy, one statement inserts
more rows behind the cursor than the next claim takes. The wake-up names them all; every one
must run without a wrap (``max_poll_seconds`` 120: the next wrap is at least 720 s away)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.apps import model_app
from tests.conftest import BACKENDS, open_database
from tests.helpers import wait_until
from tests.model.fleet import Fleet

BEHIND = 20  # rows inserted at once below the cursor; a claim takes a few (free slots + prefetch)


def _started(directory: Path) -> set[int]:
    log = directory / "runs.log"
    if not log.exists():
        return set()
    return {e["i"] for e in map(json.loads, log.read_text().splitlines()) if e["ev"] == "start" and e["w"] == "alpha"}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_named_at_once_behind_the_cursor_all_run(backend: str, tmp_path: Path) -> None:
    databases = open_database(backend, tmp_path)
    db = next(databases)
    fleet = Fleet(db.url, tmp_path, lease=6, max_poll=120)
    try:
        coordinator = model_app.create_tables(db.url)
        fleet.start(0)
        fleet.start(1)  # two coordinators: with one, SQLite's change feed happens to name fewer at once
        with coordinator.engine.begin() as conn:  # the cursor moves past these
            conn.execute(sa.insert(model_app.Job), [{"id": i} for i in range(1000, 1010)])
        wait_until(lambda: _started(tmp_path) >= set(range(1000, 1010)), what="the first rows to run")
        busy = set(range(1010, 1014))
        with coordinator.engine.begin() as conn:  # every slot busy: the next claim takes one row
            conn.execute(sa.insert(model_app.Job), [{"id": i, "action": "finish:4"} for i in busy])
        wait_until(lambda: _started(tmp_path) >= busy, what="every slot to be busy")
        with coordinator.engine.begin() as conn:  # one statement, one wake-up naming them all
            conn.execute(sa.insert(model_app.Job), [{"id": i} for i in range(1, BEHIND + 1)])
        wanted = set(range(1, BEHIND + 1))
        try:
            wait_until(lambda: _started(tmp_path) >= wanted, timeout=30, what="every row behind the cursor to run")
        except AssertionError:
            missing = sorted(wanted - _started(tmp_path))
            raise AssertionError(f"{backend}: rows {missing} of {BEHIND} inserted behind the cursor did not run "
                                 "within 30 s (max_poll_seconds 120)") from None  # fmt: skip
        coordinator.engine.dispose()
    finally:
        fleet.abandon()
        databases.close()
