"""Limits across a fleet of coordinator processes (docs/limits.md): no instant above a limit,
and a killed pod's slots back when its leases expire."""

from __future__ import annotations

import signal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus
from tests.apps import limited
from tests.apps.limited import Job
from tests.chaos.conftest import Processes
from tests.conftest import Database
from tests.helpers import kill, wait_until

ITEMS = {"postgresql": 240, "mariadb": 160, "sqlite": 80}
LIMITED = "tests.apps.limited"


def _statuses(c: Coordinator, db: Database, ids: list[int]) -> list[ExecutionStatus | None]:
    with Session(db.engine) as s:
        return [c.execution_status(s, worker="jobs", source_id=i) for i in ids]


@pytest.mark.slow
def test_eight_coordinators_never_exceed_the_limits(db: Database, processes: Processes) -> None:
    made = limited.build(db.url, limits=limited.limits_of(2, 6, None, 1.0))  # the tables
    n = ITEMS[db.backend]
    limited.add_jobs(db.engine, [i % 5 for i in range(n)], hold=0.02)
    for _ in range(8):
        processes.coordinator(db.url, "--per-customer", "2", "--total", "6", "--concurrency", "2", module=LIMITED)
    ids = list(range(1, n + 1))
    wait_until(lambda: all(s is ExecutionStatus.FINISHED for s in _statuses(made, db, ids)), timeout=600,
               interval=0.5, what=f"{n} jobs to finish")  # fmt: skip
    spans = limited.spans(db.engine)
    assert sorted(s.job_id for s in spans) == ids  # each job ran once
    assert limited.most_at_once([(s.started, s.ended) for s in spans]) <= 6
    for customer in range(5):
        assert limited.most_at_once([(s.started, s.ended) for s in spans if s.customer == customer]) <= 2
    assert len({s.pid for s in spans}) >= 2  # handlers of more than one process took part
    made.abort()


@pytest.mark.slow
def test_a_killed_pods_slot_comes_back_when_its_lease_expires(db: Database, processes: Processes) -> None:
    survivor = limited.build(db.url, limits=limited.limits_of(1, None, None, 1.0), lease_seconds=2)
    limited.add_jobs(db.engine, [1], hold=3600)
    limited.add_jobs(db.engine, [1, 1], hold=0)
    victim = processes.coordinator(db.url, "--per-customer", "1", "--lease", "2", "--concurrency", "3", module=LIMITED)
    wait_until(lambda: _statuses(survivor, db, [1]) == [ExecutionStatus.WORKING], what="job 1 running in the victim")
    # Its customer's slot is held: the other jobs wait, whatever the victim's free handlers.
    assert _statuses(survivor, db, [2, 3]) == [None, None]
    kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    with Session(db.engine) as s:
        s.execute(sa.update(Job).where(Job.id == 1).values(hold=0))
        s.commit()
    survivor.start()
    try:
        wait_until(lambda: all(s is ExecutionStatus.FINISHED for s in _statuses(survivor, db, [1, 2, 3])),
                   what="every job finished after the lease expired")  # fmt: skip
    finally:
        survivor.abort()
    spans = limited.spans(db.engine)
    assert sorted(s.job_id for s in spans) == [1, 2, 3]
    assert limited.most_at_once([(s.started, s.ended) for s in spans]) == 1
