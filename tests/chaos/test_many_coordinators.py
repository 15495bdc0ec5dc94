"""Several coordinator processes drain one database: every item committed once, never run twice."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from tests.apps import basic
from tests.chaos.conftest import Processes
from tests.helpers import wait_until
from tests.integration.conftest import App

ITEMS = {"postgresql": 3000, "mariadb": 1000, "sqlite": 600}


@pytest.mark.slow
def test_processes_drain_without_double_runs(app: App, processes: Processes) -> None:
    app.coordinator()  # tables
    n = ITEMS[app.db.backend]
    # "sleep:0" marks each handler start in a committed row of its own: a second start of an
    # item, even one whose commit was fenced off, would show there.
    with Session(app.db.engine) as s:
        s.execute(sa.insert(basic.Item), [{"action": "sleep:0"} for _ in range(n)])
        s.commit()
    for _ in range(3):
        processes.coordinator(app.db.url, "--concurrency", "2")

    def finished() -> bool:
        with Session(app.db.engine) as s:
            counts = app.coordinators[0].workers["items"].counts(s)
        return counts[ExecutionStatus.FINISHED] == n

    wait_until(finished, timeout=600, interval=0.5, what=f"{n} items to finish")
    with Session(app.db.engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(basic.Output)) == n
        assert s.scalar(sa.select(sa.func.count()).select_from(basic.Started)) == n
        assert s.scalar(sa.select(sa.func.count(sa.distinct(basic.Started.item_id)))) == n
        assert s.scalar(sa.select(sa.func.max(basic.Item.runs))) == 1
        # All three processes took part.
        assert s.scalar(sa.select(sa.func.count(sa.distinct(basic.Output.pid)))) >= 3
