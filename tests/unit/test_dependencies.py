"""Which workers wait for which, read from their eligible queries without a database."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, ExecutionStatus
from dbworker.wakeups.dependencies import ANY, awaited, dependency_map, waiter_map, waiters
from tests.apps import basic


def build() -> Coordinator:
    engine = sa.create_engine("sqlite:///unused.db")
    c = Coordinator(sessionmaker(engine), database_url="sqlite:///unused.db")
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)

    def after_items() -> sa.Select[Any]:
        return sa.select(basic.Item).where(
            c.has_execution_status(worker="items", source_id=basic.Item.id, statuses=[ExecutionStatus.FINISHED])
        )

    def joined() -> sa.Select[Any]:
        # The application may also read a work table itself: that counts too.
        work = c.workers["second"].table
        return sa.select(basic.Item).join(work, work.c.source_id == basic.Item.id)

    def broken() -> sa.Select[Any]:
        raise RuntimeError("needs application state")

    c.transactional_worker(name="second", source=basic.Item, eligible=after_items)(basic.handle)
    c.transactional_worker(name="third", source=basic.Item, eligible=joined)(basic.handle)
    c.transactional_worker(name="plain", source=basic.Item, eligible=basic.ready_items)(basic.handle)
    c.transactional_worker(name="unknown", source=basic.Item, eligible=broken)(basic.handle)
    return c


def registered(c: Coordinator) -> list[Any]:
    return c.registrations()


def test_eligible_queries_name_the_workers_they_wait_for() -> None:
    deps = dependency_map(registered(build()))
    assert deps["items"] == frozenset()
    assert deps["second"] == {"items"}
    assert deps["third"] == {"second"}
    assert deps["plain"] == frozenset()
    assert deps["unknown"] is ANY  # could not be built now: assume it may wait for anything


def test_waiters_and_awaited() -> None:
    deps = dependency_map(registered(build()))
    assert sorted(waiters(deps, "items")) == ["second", "unknown"]
    assert sorted(waiters(deps, "plain")) == ["unknown"]
    assert awaited(deps) is None  # "unknown" may wait for anyone: announce every end
    known = {k: v for k, v in deps.items() if k != "unknown"}
    assert awaited(known) == {"items", "second"}
    assert awaited({"items": frozenset()}) == frozenset()


def test_waiter_map_answers_as_waiters_does() -> None:
    deps = dependency_map(registered(build()))
    found = waiter_map(deps)
    for name in deps:
        assert found[name] == set(waiters(deps, name))
    assert found[None] == {"unknown"}  # an unregistered worker ended: only "may wait for anything"
