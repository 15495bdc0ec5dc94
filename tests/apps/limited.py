"""A test application with limits: jobs of customers, each handler recording when it ran.

``python -m tests.apps.limited URL [--per-customer N] [--total N] [--rate N --per S]
[--lease S] [--concurrency N]`` runs its coordinator until SIGTERM (prints "started"), as
``tests.apps.runner`` does for ``basic``. A handler sleeps ``hold`` seconds and then commits
a ``limited_spans`` row (its start and end, ``time.time()``) through a session of its own, so
the span is recorded before the outcome's commit, inside the time its slots were held. A
negative ``hold`` waits until the row's ``hold`` is set to 0 or more.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Limit, Outcome
from tests import pooler
from tests.apps.runner import serve


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "limited_jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[int] = mapped_column()
    hold: Mapped[float] = mapped_column(sa.Double, default=0.0)


class Span(Base):
    __tablename__ = "limited_spans"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column()
    customer: Mapped[int] = mapped_column()
    pid: Mapped[int] = mapped_column()
    started: Mapped[float] = mapped_column(sa.Double)
    ended: Mapped[float] = mapped_column(sa.Double)


def handle(job: Job, session: Session) -> Outcome:
    started = time.time()
    job_id = job.id
    while job.hold < 0:  # held until the test sets hold >= 0, read in fresh transactions
        time.sleep(0.05)
        session.rollback()
        job = session.get_one(Job, job_id)
    if job.hold:
        time.sleep(job.hold)
    with Session(session.get_bind()) as s:
        s.add(Span(job_id=job.id, customer=job.customer, pid=os.getpid(), started=started, ended=time.time()))
        s.commit()
    return Finished()


def limits_of(per_customer: int | None, total: int | None, rate: int | None, per: float) -> list[Limit]:
    found = []
    if per_customer is not None:
        found.append(Limit(key=Job.customer, concurrency=per_customer))
    if total is not None:
        found.append(Limit(key=None, concurrency=total))
    if rate is not None:
        found.append(Limit(key=Job.customer, rate=rate, per=per))
    return found


def first_job() -> sa.Select[Any]:
    """An eligible query of job 1 only: a pod that can free a slot and never take the next."""
    return sa.select(Job).where(Job.id == 1)


def build(url: str, *, limits: list[Limit], concurrency: int = 2, eligible: Any = None, **settings: Any) -> Coordinator:
    engine = sa.create_engine(url, pool_pre_ping=True)
    settings = {"poll_seconds": 0.05, "max_poll_seconds": 0.5, **pooler.coordinator_options(url), **settings}
    coordinator = Coordinator(sessionmaker(engine), database_url=url, **settings)
    Base.metadata.create_all(coordinator.engine, tables=[Job.__table__, Span.__table__])
    coordinator.transactional_worker(name="jobs", source=Job, concurrency=concurrency, eligible=eligible,
                                     limits=limits)(handle)  # fmt: skip
    coordinator.create_worker_tables()
    return coordinator


def add_jobs(engine: sa.Engine, customers: list[int], hold: float = 0.0) -> None:
    with Session(engine) as s:
        s.execute(sa.insert(Job), [{"customer": c, "hold": hold} for c in customers])
        s.commit()


def spans(engine: sa.Engine) -> list[Span]:
    with Session(engine) as s:
        return list(s.scalars(sa.select(Span).order_by(Span.started)))


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same instant)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--per-customer", type=int)
    parser.add_argument("--total", type=int)
    parser.add_argument("--rate", type=int)
    parser.add_argument("--per", type=float, default=1.0)
    parser.add_argument("--lease", type=float, default=30)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    limits = limits_of(args.per_customer, args.total, args.rate, args.per)
    serve(build(args.url, limits=limits, concurrency=args.concurrency, lease_seconds=args.lease))


if __name__ == "__main__":
    main()
