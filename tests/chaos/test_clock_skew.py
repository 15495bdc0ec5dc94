"""Leases follow the database server's clock: a skewed host neither steals nor keeps claims.

The skewed coordinator is a real process whose clock libfaketime moves by two minutes.
SQLite has no server clock (the database is the host), so these cases run where one exists.
"""

from __future__ import annotations

import glob
import uuid

import pytest
import sqlalchemy as sa

from dbworker import ExecutionStatus
from dbworker.sql import dialects
from tests.chaos.conftest import Processes
from tests.helpers import descendants_of, wait_until
from tests.integration.conftest import App

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))


def skewed(offset: str) -> dict[str, str]:
    if not LIBFAKETIME:
        pytest.skip("libfaketime is not installed (Debian package faketime; .ci/run installs it)")
    return {"LD_PRELOAD": LIBFAKETIME[0], "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.fixture(autouse=True)
def _server_clock_only(app: App) -> None:
    if app.db.backend == "sqlite":
        pytest.skip("SQLite is embedded: its clock is the host's own, there is no server clock")


def test_a_host_ahead_does_not_steal_live_claims(app: App, processes: Processes) -> None:
    owner = app.coordinator(concurrency=1, lease_seconds=30)
    [held] = app.add("dbwait")
    owner.start()
    wait_until(lambda: app.started(held), what="the owner to run the held item")
    token = app.state(held)["claim_token"]  # type: ignore[index]
    ahead = processes.coordinator(app.db.url, "--concurrency", "1", env=skewed("+120s"))
    [probe] = app.add("finish")  # only the skewed process has a free slot
    app.wait_status([probe], (ExecutionStatus.FINISHED,))
    assert app.outputs(probe)[0].pid in descendants_of(ahead.pid)
    state = app.state(held)
    assert state is not None and state["claim_token"] == token
    app.update_item(held, release=True)
    app.wait_status([held], (ExecutionStatus.FINISHED,))
    assert len(app.outputs(held)) == 1


def test_a_host_behind_takes_over_expired_claims(app: App, processes: Processes) -> None:
    c = app.coordinator()
    [dead] = app.add("finish")
    table = c.workers["items"].table
    with app.db.engine.connect() as conn:
        caps = dialects.of(conn)
        conn.execute(
            sa.insert(table).values(
                source_id=dead,
                execution_status="working",
                claim_token=str(uuid.uuid4()),
                lease_expires_at=caps.now_plus(-1),  # expired a second ago, by the server's clock
            )
        )
        conn.commit()
    processes.coordinator(app.db.url, "--concurrency", "1", env=skewed("-120s"))
    app.wait_status([dead], (ExecutionStatus.FINISHED,))
