"""Fixtures of the console tests: the acceptance application's database and a console client.

``appdb_all`` (SQLite, PostgreSQL, MariaDB) comes from the acceptance tests; ``client``
serves the console in-process (Starlette's TestClient) over that database.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from starlette.testclient import TestClient

from dbworker.console import app
from tests.acceptance.conftest import AppDb, appdb, appdb_all, sqlite_db  # noqa: F401 - fixtures
from tests.console.support import SECRET

TOKENS = {"alice": SECRET}

ClientFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(appdb_all: AppDb) -> Iterator[ClientFactory]:  # noqa: F811
    """A console client over ``appdb_all`` (work tables created); ``signed_in`` signs in first."""
    appdb_all.create_worker_tables()
    made: list[TestClient] = []

    def make(*, read_only: bool = False, tokens: dict[str, str] | None = None, signed_in: bool = True,
             trace_url: str | None = None) -> TestClient:  # fmt: skip
        client = TestClient(app.build(appdb_all.coordinator, tokens=TOKENS if tokens is None else tokens, read_only=read_only,
                                      trace_url=trace_url))  # fmt: skip
        made.append(client)
        if signed_in and (TOKENS if tokens is None else tokens):
            r = client.post("/login", data={"token": SECRET, "next": "/"}, follow_redirects=False)
            assert r.status_code == 303, r.text
        return client

    yield make
    for c in made:
        c.close()


def csrf_of(html: str) -> str:
    """The CSRF value the page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no action form"
    return found.group(1)
