"""The asyncio driver and pool size of async handler processes (sql/drivers.py), and the
defaults and checks of ``processes`` (workers.py)."""

from __future__ import annotations

import functools

import pytest
from sqlalchemy.pool import NullPool

from dbworker import workers
from dbworker.sql import drivers
from dbworker.sql.drivers import ASYNC_POOL_MAX


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db"),
        ("sqlite+pysqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u:p@h/d?options=-csearch_path%3Ds", "postgresql+psycopg://u:p@h/d?options=-csearch_path%3Ds"),
        ("postgresql+psycopg2://u@h/d", "postgresql+psycopg://u@h/d"),
        ("postgresql+asyncpg://u@h/d", "postgresql+asyncpg://u@h/d"),
        ("mysql+pymysql://root@h:3306/d", "mysql+aiomysql://root@h:3306/d"),
        ("mariadb+pymysql://root@h/d", "mariadb+aiomysql://root@h/d"),
        ("mysql+asyncmy://root@h/d", "mysql+asyncmy://root@h/d"),
    ],
)
def test_async_url_swaps_in_the_servers_asyncio_driver(url: str, expected: str) -> None:
    assert drivers.async_url(url).render_as_string(hide_password=False) == expected


def test_async_url_refuses_a_server_without_one() -> None:
    with pytest.raises(ValueError, match=r"async handlers need an asyncio driver.*'oracle'"):
        drivers.async_url("oracle://u@h/d")


@pytest.mark.parametrize("capacity", [1, 3, ASYNC_POOL_MAX, 10, 200, 1024])
def test_a_process_holds_at_most_min_of_capacity_and_the_pool_max_all_kept(capacity: int) -> None:
    options = drivers.async_engine_options({"echo": False}, capacity)
    assert options["echo"] is False
    assert options["pool_size"] == min(capacity, ASYNC_POOL_MAX)
    assert options["max_overflow"] == 0  # no connection opened and closed again per burst


@pytest.mark.parametrize("given", [{"pool_size": 2}, {"max_overflow": 0}, {"poolclass": NullPool}])
def test_the_applications_own_pool_settings_win(given: dict[str, object]) -> None:
    assert drivers.async_engine_options(given, 200) == given


async def _async_handler(row: object, session: object) -> None: ...


def _sync_handler(row: object, session: object) -> None: ...


def test_processes_defaults_and_checks() -> None:
    assert workers.is_async(_async_handler) and workers.is_async(functools.partial(_async_handler))
    assert not workers.is_async(_sync_handler)
    check = workers.check_processes
    assert check(None, concurrency=200, handler=_async_handler, name="w") is None
    assert check(4, concurrency=200, handler=_async_handler, name="w") == 4
    assert check(3, concurrency=3, handler=_sync_handler, name="w") == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"processes of worker 'w' must be an integer >= 1"):
            check(bad, concurrency=3, handler=_async_handler, name="w")
    with pytest.raises(ValueError, match=r"must equal its concurrency \(3\) for a sync handler.*async def"):
        check(1, concurrency=3, handler=_sync_handler, name="w")
    with pytest.raises(ValueError, match=r"must be at most its concurrency \(2\)"):
        check(3, concurrency=2, handler=_async_handler, name="w")
