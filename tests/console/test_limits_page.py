"""The console's worker page for workers with limits (docs/limits.md), in-process over
SQLite, PostgreSQL and MariaDB: how many items wait on a limit and the keys most behind,
escaped, and masked like any source value; nothing of it for workers without limits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from starlette.testclient import TestClient

from dbworker import Coordinator, Finished, Limit, Outcome
from dbworker.console import app
from tests.conftest import Database
from tests.console.conftest import TOKENS
from tests.console.support import SECRET


class Base(DeclarativeBase):
    pass


class Call(Base):
    __tablename__ = "console_limit_calls"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(sa.String(40))
    api_token: Mapped[str] = mapped_column(sa.String(40))


def handle(source: Call, session: Session) -> Outcome:
    return Finished()


@pytest.fixture
def client(db: Database) -> Iterator[TestClient]:
    c = Coordinator(sessionmaker(db.engine), database_url=db.url)
    Base.metadata.create_all(db.engine)
    c.transactional_worker(name="per_customer", source=Call, limits=[Limit(key=Call.customer, concurrency=1)])(handle)
    c.transactional_worker(name="per_token", source=Call, limits=[Limit(key=Call.api_token, concurrency=2)])(handle)
    c.transactional_worker(name="plain", source=Call)(handle)
    c.create_worker_tables()
    rows = [("<b>acme</b>", "tok-1")] * 4 + [("globex", "tok-1")] * 2 + [("initech", "tok-2")]
    with db.engine.begin() as conn:
        conn.execute(sa.insert(Call), [{"customer": a, "api_token": t} for a, t in rows])
    with TestClient(app.build(c, tokens=TOKENS, read_only=False)) as client:
        r = client.post("/login", data={"token": SECRET, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        yield client


def _cells(html: str) -> str:
    start = html.index('class="on-limit"')
    return html[start:html.index("</section>", start)]


def test_the_worker_page_shows_items_waiting_on_a_limit_and_the_keys_most_behind(client: TestClient) -> None:
    page = client.get("/workers/per_customer")
    assert page.status_code == 200
    section = _cells(page.text)
    # One of each customer could start: 3 of acme and 1 of globex wait on the limit.
    assert "Waiting on a limit: <strong" in section and ">4</strong>" in section
    assert "<td>&lt;b&gt;acme&lt;/b&gt;</td><td class=\"num\">3</td><td class=\"num\">0</td>" in section
    assert "<td>globex</td><td class=\"num\">1</td>" in section
    assert "initech" not in section  # its one item can start: it waits on nothing
    assert "<b>acme</b>" not in page.text


def test_keys_of_a_secret_column_are_masked(client: TestClient) -> None:
    section = _cells(client.get("/workers/per_token").text)
    assert ">4</strong>" in section  # 6 of tok-1 with 2 slots
    assert "tok-1" not in section and "hidden: the column&#39;s name says it is a secret" in section


def test_a_worker_without_limits_shows_nothing_of_them(client: TestClient) -> None:
    page = client.get("/workers/plain")
    assert page.status_code == 200 and "on-limit" not in page.text and "Waiting on a limit" not in page.text


def test_the_api_answers_the_same_for_scripts(client: TestClient) -> None:
    r = client.get("/api/workers/per_customer/limits")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "worker": "per_customer",
        "waiting_on_limit": {"count": 4, "capped": False, "keys": [
            {"key": "<b>acme</b>", "waiting": 3, "held": 0}, {"key": "globex", "waiting": 1, "held": 0}]},
    }  # fmt: skip
    assert "tok-1" not in client.get("/api/workers/per_token/limits").text
    assert client.get("/api/workers/plain/limits").json() == {"worker": "plain", "waiting_on_limit": None}
    assert client.get("/api/workers/nope/limits").status_code == 404
