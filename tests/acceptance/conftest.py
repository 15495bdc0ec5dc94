"""Fixtures of the acceptance tests: a database with the test application's tables, workers.

``appdb`` runs a test on SQLite and PostgreSQL, ``appdb_all`` on MariaDB too (where a test
is cheap enough to run three times).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.acceptance import app
from tests.acceptance.support import Worker
from tests.conftest import Database, open_database


class AppDb:
    """A fresh database holding the test application's tables."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.url = db.url
        self.backend = db.backend
        # Only the application's own table: the work tables share its MetaData (SPEC) and are
        # made by `dbworker migrate`, --create-tables or create_worker_tables() where a test says so.
        app.Base.metadata.tables["tasks"].create(db.engine)
        self.coordinator = app.build(db.url)

    def add(self, *tasks: dict[str, Any]) -> None:
        with self.db.engine.begin() as conn:
            # Every row spells every column: executemany takes its columns from the first row.
            rows = [
                {"kind": "main", "action": "finish", "seconds": 0.0, "result": None, **t}
                for t in tasks
            ]
            conn.execute(sa.insert(app.Task), rows)

    def task(self, task_id: int) -> Any:
        with Session(self.db.engine) as s:
            return s.get(app.Task, task_id)

    def state(self, worker: str, task_id: int) -> Any:
        with Session(self.db.engine) as s:
            return self.coordinator.workers[worker].state(s, task_id)

    def create_worker_tables(self) -> None:
        self.coordinator.create_worker_tables()

    def close(self) -> None:
        self.coordinator.engine.dispose()


def _appdb(backend: str, tmp_path: Path) -> Iterator[AppDb]:
    for db in open_database(backend, tmp_path):
        a = AppDb(db)
        try:
            yield a
        finally:
            a.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def appdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    yield from _appdb(request.param, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def appdb_all(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    yield from _appdb(request.param, tmp_path)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[AppDb]:
    """SQLite only, for tests whose subject does not depend on the database."""
    yield from _appdb("sqlite", tmp_path)


@pytest.fixture
def pg_db(tmp_path: Path) -> Iterator[AppDb]:
    """PostgreSQL only, for tests that need a server to lose."""
    yield from _appdb("postgresql", tmp_path)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start `dbworker run` processes; every one is ended after the test."""
    started: list[Worker] = []

    def start(appdb: AppDb, *args: str, **kw: Any) -> Worker:
        w = Worker(kw.pop("url", appdb.url), tmp_path, *args, **kw)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()
