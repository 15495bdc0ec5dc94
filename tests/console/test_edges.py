"""The console at its edges (issue 26), in-process over SQLite, PostgreSQL and MariaDB:
loopback hosts only without tokens (DNS rebinding), security headers on every response,
signing out on the server side, slowed failed sign-ins, keys of any text, integers that are
out of range or not written plainly, and a large source column.
"""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from starlette.testclient import TestClient

from dbworker import Coordinator, ExecutionStatus, Finished, Outcome
from dbworker.console import app, auth, pages
from tests.acceptance.conftest import AppDb
from tests.conftest import Database
from tests.console.conftest import TOKENS, ClientFactory, csrf_of
from tests.console.support import SECRET

KEYS = [
    "a/b",
    "x/retry",
    "/lead",
    "trail/",
    "with space",
    " lead",
    "ключ ✓",
    "100%",
    "q?x#y",
    "1",
    ".",
    "..",
    "a/..",
]  # (Starlette's TestClient decodes %25 twice: no "%2F" text here)


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"
    key: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    body: Mapped[str] = mapped_column(
        sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), default=""
    )


def note(source: Note, session: Session) -> Outcome:
    return Finished()


@pytest.fixture
def notes(db: Database) -> Iterator[Coordinator]:
    """A coordinator with worker ``notes`` over text keys; one failed item per key of KEYS."""
    coordinator = Coordinator(sessionmaker(db.engine), database_url=db.url)
    Base.metadata.create_all(db.engine)
    coordinator.transactional_worker(name="notes", source=Note)(note)
    coordinator.create_worker_tables()
    table = coordinator.workers["notes"].table
    with db.engine.begin() as conn:
        conn.execute(sa.insert(Note.__table__), [{"key": k, "body": f"body of {k}"} for k in KEYS])
        conn.execute(
            sa.insert(table),
            [{"source_id": k, "execution_status": "failed", "error": "boom"} for k in KEYS],
        )
    yield coordinator


def _status(coordinator: Coordinator, key: str) -> ExecutionStatus | None:
    with Session(coordinator.engine) as s:
        return coordinator.execution_status(s, worker="notes", source_id=key)


def test_every_key_can_be_opened_retried_and_cancelled(notes: Coordinator) -> None:
    client = TestClient(app.build(notes, tokens=TOKENS, read_only=False))
    assert (
        client.post(
            "/login", data={"token": SECRET, "next": "/"}, follow_redirects=False
        ).status_code
        == 303
    )
    listing = client.get("/workers/notes").text
    auth_header = {"Authorization": f"Bearer {SECRET}"}
    for key in KEYS:
        path = pages.item_url("notes", key)
        assert f'href="{html.escape(path)}"' in listing, key  # the worker page links each item by its whole key
        page = client.get(path)
        assert page.status_code == 200, (key, page.text[:300])
        assert "body of" in page.text
        assert client.get(f"/api{path}", headers=auth_header).json()["id"] == key
        done = client.post(
            pages.item_url("notes", key, "retry"), data={"csrf": csrf_of(page.text), "back": path}, follow_redirects=False
        )
        assert done.status_code == 303 and "done=retried" in done.headers["location"], key
        assert _status(notes, key) is ExecutionStatus.UNFINISHED  # reset: claimed again
        back = client.get(done.headers["location"])
        assert back.status_code == 200, key
        gone = client.post(
            pages.item_url("notes", key, "cancel"),
            data={"csrf": csrf_of(back.text), "back": path},
            follow_redirects=False,
        )
        assert gone.status_code == 303 and "done=cancelled" in gone.headers["location"], key
        assert _status(notes, key) is ExecutionStatus.FAILED
        retried = client.post(f"/api{pages.item_url('notes', key, 'retry')}", headers=auth_header)
        assert retried.json() == {"retried": True}, key
    assert client.get("/workers/notes/items/a").status_code == 404  # "a/b" is not "a"


def test_integers_out_of_range_or_not_written_plainly_are_never_other_items(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    appdb_all.add({"id": 10, "action": "fail"}, {"id": 1, "action": "fail"})
    client = make_client()
    auth_header = {"Authorization": f"Bearer {SECRET}"}
    assert client.get("/workers/main/items/10").status_code == 200
    huge_ones = ["99999999999999999999999", "9223372036854775808", "-9223372036854775809"]
    if appdb_all.backend != "sqlite":  # an INTEGER key holds 32 bits there (64 on SQLite)
        huge_ones += ["2147483648", "-2147483649"]
    for huge in huge_ones:
        for path in (f"/workers/main/items/{huge}", f"/api/workers/main/items/{huge}"):
            assert client.get(path, headers=auth_header).status_code == 404, path
        assert (
            client.post(f"/api/workers/main/items/{huge}/retry", headers=auth_header).status_code
            == 404
        )
        assert (
            client.post(f"/api/workers/main/items/{huge}/cancel", headers=auth_header).status_code
            == 404
        )
    for odd in ("1_0", "\u0661\u0660", "+10", " 10", "10 ", "010", "0x0a", "1e1"):
        path = f"/workers/main/items/{quote(odd, safe='')}"
        assert client.get(path).status_code in (400, 404), odd
        assert client.get(f"/api{path}", headers=auth_header).status_code in (400, 404), odd
        assert client.post(f"/api{path}/cancel", headers=auth_header).status_code in (400, 404), odd
    assert appdb_all.state("main", 10) is None  # nothing acted on item 10


def test_without_tokens_only_requests_for_a_loopback_host_are_answered(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing."""
    client = make_client(tokens={})
    for host in (
        "evil.example",
        "evil.example:8080",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "10.0.0.1",
    ):
        for method, path in (
            ("GET", "/"),
            ("GET", "/api/workers"),
            ("POST", "/api/workers/main/pause"),
        ):
            r = client.request(method, path, headers={"host": host})
            assert r.status_code == 421, (host, path, r.status_code)
    with Session(appdb_all.db.engine) as s:
        assert not appdb_all.coordinator.workers["main"].paused(s)
    for host in (
        "localhost",
        "localhost:8080",
        "127.0.0.1:8080",
        "127.1.2.3",
        "[::1]:8080",
        "[::1]",
    ):
        assert client.get("/api/workers", headers={"host": host}).status_code == 200, host
    assert (
        client.get("/healthz", headers={"host": "evil.example"}).status_code == 200
    )  # probes name the pod
    signed = make_client()  # with tokens, a caller that signed in may use any name
    assert signed.get("/", headers={"host": "console.example"}).status_code == 200


def test_every_response_carries_the_security_headers(
    make_client: ClientFactory, appdb_all: AppDb
) -> None:
    appdb_all.add({"id": 1, "action": "fail"})
    client = make_client()
    anonymous = make_client(signed_in=False)
    responses = [client.get(p, follow_redirects=False) for p in ("/", "/workers/main", "/workers/main/items/1", "/api/workers",
                 "/api/workers/main/items/1", "/workers/nope", "/api/docs", "/static/console.css")]  # fmt: skip
    responses += [
        anonymous.get(p, follow_redirects=False)
        for p in ("/", "/login", "/api/workers", "/healthz")
    ]
    for r in responses:
        csp = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, r.url
        assert r.headers.get("x-content-type-options") == "nosniff", r.url
        assert r.headers.get("referrer-policy") in ("no-referrer", "same-origin"), r.url
        if not r.url.path.startswith("/static/"):
            assert r.headers.get("cache-control") == "no-store", r.url


def test_signing_out_ends_the_session_on_the_server(make_client: ClientFactory) -> None:
    client = make_client()
    cookie = client.cookies.get(auth.COOKIE)
    assert cookie and client.get("/").status_code == 200
    page = client.get("/")
    assert (
        client.post(
            "/logout", data={"csrf": csrf_of(page.text)}, follow_redirects=False
        ).status_code
        == 303
    )
    replay = TestClient(client.app)  # the same console, a copy of the cookie
    replay.cookies.set(auth.COOKIE, cookie)
    r = replay.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login"), (
        "a signed-out cookie still works"
    )
    assert replay.get("/api/workers").status_code == 401


def test_failed_sign_ins_from_a_client_are_slowed(make_client: ClientFactory) -> None:
    client = make_client(signed_in=False)
    now = [1000.0]
    console = client.app.state.console  # type: ignore[attr-defined]
    client.app.state.console = dataclasses.replace(
        console, throttle=auth.Throttle(clock=lambda: now[0])
    )  # type: ignore[attr-defined]
    for _ in range(auth.FREE_FAILURES):
        assert client.post("/login", data={"token": "wrong-wrong-wrong-wrong"}).status_code == 401
    refused = client.post("/login", data={"token": SECRET}, follow_redirects=False)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "set-cookie" not in refused.headers
    now[0] += 1.0
    assert client.post("/login", data={"token": "wrong-wrong-wrong-wrong"}).status_code == 401
    assert client.post("/login", data={"token": SECRET}, follow_redirects=False).status_code == 429
    now[0] += 2.0
    assert client.post("/login", data={"token": SECRET}, follow_redirects=False).status_code == 303


def test_an_item_page_with_a_large_source_column_is_quick_and_cut(notes: Coordinator) -> None:
    """320 KB of letters and digits in a column took seconds per request (quadratic masking)."""
    with Session(notes.engine) as s:
        s.execute(sa.update(Note).where(Note.key == "1").values(body="0123456789abcdef" * 20_000))
        s.commit()
    client = TestClient(app.build(notes, tokens=TOKENS, read_only=True))
    client.post("/login", data={"token": SECRET, "next": "/"})
    start = time.perf_counter()
    page = client.get("/workers/notes/items/1")
    assert page.status_code == 200 and "(320000 characters)" in page.text
    assert time.perf_counter() - start < 5.0 and len(page.text) < 50_000
