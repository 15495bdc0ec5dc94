"""Fixtures for the contract tests: a running ``basic`` application on the `db` database.

Here (and in tests/chaos) `db` is also ``pgbouncer``: PostgreSQL through PgBouncer in
transaction mode (tests/pooler.py), what ``make test-pooler`` selects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus
from tests.apps import basic
from tests.conftest import BACKENDS, POOLED, Database, open_database
from tests.helpers import logging_restored, wait_until

FAST = {"poll_seconds": 0.05, "max_poll_seconds": 0.5}
DONE = (ExecutionStatus.FINISHED, ExecutionStatus.FAILED)


class App:
    """The basic test application on one database, with helpers to drive and inspect it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.coordinators: list[Coordinator] = []

    def coordinator(self, **kwargs: Any) -> Coordinator:
        c = basic.build(self.db.url, **{**FAST, **kwargs})
        self.coordinators.append(c)
        return c

    def add(self, *actions: str, **fields: Any) -> list[int]:
        return basic.add_items(self.db.engine, list(actions), **fields)

    def status(self, item_id: int, worker: str = "items") -> ExecutionStatus | None:
        c = self.coordinators[0]
        with Session(self.db.engine) as s:
            return c.execution_status(s, worker=worker, source_id=item_id)

    def state(self, item_id: int) -> dict[str, Any] | None:
        with Session(self.db.engine) as s:
            return self.coordinators[0].workers["items"].state(s, item_id)

    def wait_status(self, ids: list[int], statuses: tuple[ExecutionStatus, ...] = DONE, timeout: float = 90) -> None:
        def check() -> bool:
            return all(self.status(i) in statuses for i in ids)

        wait_until(check, timeout=timeout, what=f"items {ids[:5]}... to reach {[str(s) for s in statuses]}")

    def outputs(self, item_id: int | None = None) -> list[Any]:
        with Session(self.db.engine) as s:
            q = sa.select(basic.Output)
            if item_id is not None:
                q = q.where(basic.Output.item_id == item_id)
            return list(s.scalars(q))

    def started(self, item_id: int | None = None) -> list[Any]:
        with Session(self.db.engine) as s:
            q = sa.select(basic.Started)
            if item_id is not None:
                q = q.where(basic.Started.item_id == item_id)
            return list(s.scalars(q))

    def item(self, item_id: int) -> Any:
        with Session(self.db.engine) as s:
            return s.get(basic.Item, item_id)

    def update_item(self, item_id: int, **fields: Any) -> None:
        with Session(self.db.engine) as s:
            s.execute(sa.update(basic.Item).where(basic.Item.id == item_id).values(**fields))
            s.commit()

    def close(self) -> None:
        for c in self.coordinators:
            c.abort()


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Tests that run the pod command's ``main`` in this process (``inspect``) have it set up
    logging for the process: undone after each, so that later tests' caplog sees dbworker's
    records and no handler writes to a capture pytest has closed."""
    with logging_restored():
        yield


@pytest.fixture(params=(*BACKENDS, POOLED))
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    yield from open_database(request.param, tmp_path)


@pytest.fixture
def app(db: Database) -> Iterator[App]:
    a = App(db)
    try:
        yield a
    finally:
        a.close()


WaitFor = Callable[..., Any]


@pytest.fixture
def coordinators() -> Iterator[list[Coordinator]]:
    """Coordinators a test starts (appends), aborted at its end whatever happened."""
    started: list[Coordinator] = []
    try:
        yield started
    finally:
        for c in started:
            c.abort()
