"""The database goes away: a real PostgreSQL restart mid-drain loses nothing and commits once.

No loop ends, claiming resumes by itself, and a handler that was running across the restart
keeps its claim (its lease is renewed again once the server is back). On the server itself
and through PgBouncer (tests/pooler.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from tests.apps import basic
from tests.conftest import POOLED, Database, open_database
from tests.helpers import wait_until
from tests.integration.conftest import FAST

pytestmark = pytest.mark.serial  # restarts the server every other test uses: run alone (Makefile)


@pytest.fixture(params=("postgresql", POOLED))
def pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    yield from open_database(request.param, tmp_path)


def restart_postgresql() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast"],
        check=True, capture_output=True, timeout=120,
    )


def test_postgresql_restart_mid_drain(pg: Database, tmp_path: Path) -> None:
    # The long handler waits on a file, so only dbworker's own renewals touch the database
    # while it runs; the lease outlives the restart, so keeping the claim is the right outcome.
    c = basic.build(pg.url, concurrency=3, lease_seconds=10, **FAST)
    go = tmp_path / "go"
    [long] = basic.add_items(pg.engine, [f"wait:{go}"])
    with Session(pg.engine) as s:
        s.execute(sa.insert(basic.Item), [{"action": "sleep:0.02"} for _ in range(300)])
        s.commit()
    ids = list(range(long, long + 301))

    def count(status: ExecutionStatus) -> int:
        with Session(pg.engine) as s:
            return c.workers["items"].counts(s)[status]

    c.start()
    try:
        wait_until(lambda: count(ExecutionStatus.FINISHED) >= 50, what="the drain to get going")
        with Session(pg.engine) as s:
            token = c.workers["items"].state(s, long)["claim_token"]  # type: ignore[index]
        assert token is not None
        restart_postgresql()
        pg.engine.dispose()

        def lease_renewed_after_restart() -> bool:
            with Session(pg.engine) as s:
                state = c.workers["items"].state(s, long)
                now = s.scalar(sa.select(sa.func.timezone("UTC", sa.func.now())))
            assert state is not None and state["claim_token"] == token, "the long item lost its claim"
            return bool(state["lease_expires_at"] > now)

        # Past one whole lease after the restart, the claim is still held and live.
        wait_until(lambda: count(ExecutionStatus.FINISHED) == 300, timeout=180, what="the drain to finish")
        wait_until(lease_renewed_after_restart, what="the long item's lease to be renewed")
        go.touch()
        wait_until(lambda: count(ExecutionStatus.FINISHED) == 301, what="the long item to finish")
    finally:
        c.stop(timeout=10)
    with Session(pg.engine) as s:
        assert count(ExecutionStatus.FAILED) == 0
        per_item = dict(
            s.execute(sa.select(basic.Output.item_id, sa.func.count()).group_by(basic.Output.item_id)).all()
        )
        assert sorted(per_item) == ids
        assert set(per_item.values()) == {1}
