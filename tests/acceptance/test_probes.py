"""/healthz and /readyz of a real worker while its database becomes unreachable and comes back.

The outage is a TCP proxy of the test's own between the worker and PostgreSQL being cut:
the real server keeps running for everyone else.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest

from tests.acceptance.conftest import AppDb
from tests.acceptance.support import TcpProxy, Worker
from tests.helpers import wait_until

SECRET = "s3cr3t-pw-dbw"


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    p = TcpProxy(("127.0.0.1", 5432))
    yield p
    p.close()


def test_health_turns_red_while_the_database_is_unreachable_and_green_again(
    pg_db: AppDb, proxy: TcpProxy, start_worker: Callable[..., Worker]
) -> None:
    pg_db.create_worker_tables()
    # The test server trusts local users, so a password in the URL is accepted and ignored:
    # it is there to prove that no log line, metric or probe answer ever shows it.
    url = pg_db.url.replace("postgres@127.0.0.1:5432", f"postgres:{SECRET}@127.0.0.1:{proxy.port}")
    assert url != pg_db.url
    # Short lease and polls keep the liveness bound (max(2, 3*0.5) + 0.5 = 2.5 s) short.
    w = start_worker(
        pg_db, "--lease-seconds", "2", "--poll-seconds", "0.1", "--max-poll-seconds", "0.5",
        "--backlog-seconds", "0.3", url=url,
    )  # fmt: skip
    w.wait_ready()
    assert w.get("/healthz") == (200, "ok\n")

    proxy.cut()
    reason = wait_until(
        lambda: (r := w.get("/healthz"))[0] == 503 and r[1],
        timeout=60,
        what="/healthz 503 while cut",
    )
    assert isinstance(reason, str) and "made no database round trip" in reason, reason
    # The loop's next claim and the sampler's next read fail at once on the refused
    # connection; under load each may wait for its turn: generous bounds, and the worker's log
    # if even they run out.
    for operation in ("claim", "backlog"):
        try:
            wait_until(
                lambda op=operation: (w.value("dbworker_db_errors_total", worker="main", operation=op) or 0) > 0,  # type: ignore[misc]
                timeout=90, what=f"{operation} errors counted",
            )  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe worker's log (last 4,000 characters):\n{w.log_text()[-4000:]}") from None
    assert w.process.poll() is None  # the process outlives the outage

    proxy.restore()
    wait_until(lambda: w.get("/healthz") == (200, "ok\n"), timeout=60, what="/healthz green again")
    assert w.get("/readyz")[0] == 200
    # Work flows again.
    pg_db.add({"id": 1})
    w.wait_value("dbworker_executions_total", 1, worker="main", outcome="finished")

    metrics_text = w.get("/metrics")[1]
    w.signal(signal.SIGTERM)
    assert w.wait_exit() == 0
    assert "database error" in w.log_text()  # the outage was logged...
    assert SECRET not in w.log_text() + metrics_text + reason  # ...without the password


def test_a_loop_stuck_behind_a_hanging_database_turns_health_red(
    pg_db: AppDb, proxy: TcpProxy, start_worker: Callable[..., Worker]
) -> None:
    pg_db.create_worker_tables()
    url = pg_db.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    w = start_worker(
        pg_db, "--worker", "main", "--lease-seconds", "2", "--poll-seconds", "0.1",
        "--max-poll-seconds", "0.5", "--backlog-seconds", "0", "--drain-seconds", "1", url=url,
    )  # fmt: skip
    w.wait_ready()
    proxy.blackhole()  # queries now wait forever instead of failing
    reason = wait_until(
        lambda: (r := w.get("/healthz"))[0] == 503 and r[1],
        timeout=60,
        what="/healthz 503 while hung",
    )
    assert isinstance(reason, str) and "worker 'main' made no database round trip" in reason
    # Even with its loop stuck in a query, the process stops within the drain plus a margin.
    w.signal(signal.SIGTERM)
    assert w.wait_exit(timeout=60) == 0


def test_unreachable_database_at_start_is_exit_3(
    proxy: TcpProxy, pg_db: AppDb, start_worker: Callable[..., Worker]
) -> None:
    proxy.cut()
    url = pg_db.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    w = start_worker(pg_db, url=url)
    assert w.wait_exit() == 3
    lines = [line for line in w.log_text().splitlines() if line.startswith("dbworker:")]
    assert len(lines) == 1 and lines[0].startswith("dbworker: database unreachable:"), w.log_text()
    assert "Traceback" not in w.log_text()
