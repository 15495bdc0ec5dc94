"""What dbworker's writes lock, on servers with row locks: each test holds one transaction
open at the point where it holds its locks and runs another against it, as the two meet
when claims, handlers and the application's own transactions run at once. A wrong lock
order shows as a deadlock, a lock held too wide as a wait for a lock wait timeout.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from dbworker.sql import candidates, claims, dialects, history, items
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App


def _own_id(conn: Any, backend: str) -> int:
    """The server session id of ``conn`` (a Connection or Session)."""
    query = "SELECT pg_backend_pid()" if backend == "postgresql" else "SELECT CONNECTION_ID()"
    return int(conn.execute(sa.text(query)).scalar_one())


def _waits_on_a_lock(engine: sa.Engine, backend: str, session_id: int) -> bool:
    """Whether the server session ``session_id`` waits for a row lock now."""
    with engine.connect() as conn:
        if backend == "postgresql":
            query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :id"
        else:
            query = "SELECT trx_state = 'LOCK WAIT' FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = :id"
        return bool(conn.execute(sa.text(query), {"id": session_id}).scalar())


def _lock_timeout_5_s(conn: Any, backend: str) -> None:
    """A lock wait of ``conn`` fails after 5 s (a lock held too wide shows as that error)."""
    timeout = "SET lock_timeout = '5s'" if backend == "postgresql" else "SET innodb_lock_wait_timeout = 5"
    conn.execute(sa.text(timeout))


def _run_until_it_waits(app: App, work: Callable[[Session], Any], *, what: str) -> tuple[threading.Thread, dict[str, Any]]:
    """``work(session)`` then a commit, in a thread and a session of their own, started and
    waited for until that session waits for a row lock (or the thread ended). The returned
    dict gets ``work``'s result as "result", or its exception as "error"."""
    outcome: dict[str, Any] = {}
    session_id: list[int] = []

    def run() -> None:
        try:
            with Session(app.db.engine) as s:
                session_id.append(_own_id(s, app.db.backend))
                outcome["result"] = work(s)
                s.commit()
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertion
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: (session_id and _waits_on_a_lock(app.db.engine, app.db.backend, session_id[0]))
               or not thread.is_alive(), what=what)  # fmt: skip
    return thread, outcome

def test_cancel_of_a_never_claimed_item_meets_its_first_claim_and_cancels_it(app: App) -> None:
    # The claim holds the item's source row (its candidate lock) when the application cancels
    # the item in its own transaction (MariaDB: REPEATABLE READ), then writes the item's first
    # record. The cancel waits for the claim, then cancels that claim; neither deadlocks.
    if app.db.backend == "sqlite":
        pytest.skip("SQLite claims take no row locks")
    c = app.coordinator()
    [i] = app.add("finish")
    view = c.workers["items"]
    with dialects.connect(app.db.engine) as conn:
        conn.execute(sa.select(basic.Item.id).where(basic.Item.id == i).with_for_update())
        canceller, outcome = _run_until_it_waits(app, lambda s: view.cancel(s, i),
                                                 what="the cancel to wait for the claim's lock")  # fmt: skip
        claim = claims.take(conn, view.table, i, caps=dialects.of(conn), lease_seconds=30)
        conn.commit()
    canceller.join(timeout=60)
    assert claim is not None and "error" not in outcome, outcome
    assert outcome["result"] is True
    state = app.state(i)
    assert state is not None and state["execution_status"] is ExecutionStatus.FAILED
    assert state["error"] == "cancelled"


def test_a_handler_transaction_recording_its_outcome_does_not_hold_up_claims_of_other_items(app: App) -> None:
    # A handler's transaction (MariaDB: REPEATABLE READ) has recorded its item's outcome and
    # not yet committed; a claim of another item writes its WORKING record meanwhile. The
    # outcome's write locks its own record only, so the claim does not wait for the commit.
    if app.db.backend == "sqlite":
        pytest.skip("SQLite claims take no row locks")
    c = app.coordinator()
    running, other = app.add("finish", "finish")
    table = c.workers["items"].table
    with dialects.connect(app.db.engine) as conn:
        claim = claims.take(conn, table, running, caps=dialects.of(conn), lease_seconds=30)
        conn.commit()
    assert claim is not None
    with Session(app.db.engine) as handler:
        assert items.finish(handler.connection(), table, claim)
        with dialects.connect(app.db.engine) as conn:
            _lock_timeout_5_s(conn, app.db.backend)
            assert claims.take(conn, table, other, caps=dialects.of(conn), lease_seconds=30) is not None
            conn.commit()
        handler.commit()
    assert app.status(running) is ExecutionStatus.FINISHED
    assert app.status(other) is ExecutionStatus.WORKING



def test_a_claim_that_raced_an_items_claim_does_not_hold_up_its_handlers_outcome(app: App) -> None:
    # A claim whose candidate read ran before the item's claim committed locked the item's
    # source row after that commit. The item's handler then records its outcome and history:
    # the history row's foreign key check waits for the claim's lock on the source row. The
    # claim's write must then see the record and take nothing without waiting on the handler
    # (PostgreSQL's ON CONFLICT waited: a deadlock, seen in the schedules test; MariaDB's
    # INSERT IGNORE, and its UPDATE of a record by key, wait even where the committed record
    # cannot match, so there a claim writes only where the committed record lets it win:
    # items.claim_each).
    if app.db.backend == "sqlite":
        pytest.skip("SQLite claims take no row locks")
    c = app.coordinator()
    [i] = app.add("finish")
    table = c.workers["items"].table
    with dialects.connect(app.db.engine) as conn:
        claim = claims.take(conn, table, i, caps=dialects.of(conn), lease_seconds=30)
        conn.commit()
    assert claim is not None

    def record_outcome(s: Session) -> bool:
        started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        attempt = history.Attempt(table=history.history_table(table), started_at=started, claimed_by="test:1")
        return items.Completer(table)(s.connection(), claim, ExecutionStatus.FINISHED, attempt)

    with dialects.connect(app.db.engine) as claimer:
        caps = dialects.of(claimer)
        read = candidates.lock(caps, basic.Item.id, sa.select(basic.Item.id).where(basic.Item.id == i))
        assert claimer.execute(read).scalars().all() == [i]  # the source row, locked as claims lock it
        handler, outcome = _run_until_it_waits(app, record_outcome,
                                               what="the handler's commit to wait for the claim's lock")  # fmt: skip
        _lock_timeout_5_s(claimer, app.db.backend)
        assert claims.take(claimer, table, i, caps=caps, lease_seconds=30) is None  # the item has its claim
        claimer.commit()
    handler.join(timeout=60)
    assert outcome == {"result": True}, outcome
    assert app.status(i) is ExecutionStatus.FINISHED
