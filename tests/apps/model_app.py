"""The application the model-based test (tests/model) drives: jobs whose ``action`` says what
the handler does, handled by two workers on the one source table.

Workers: ``alpha`` takes every enabled job in key order from its cursor (an unordered
``eligible``); ``beta`` takes the enabled jobs of lane ``b`` through an ordered query. Actions:
``finish:D`` (sleep D seconds, then Finished), ``later:S`` (step 1 returns
``Unfinished(after=S)``, step 2 finishes), ``fail:K`` (raises until the test has reset the
item K times, then finishes).

What the handlers leave for the test to check:
- a JSON line per handler start and end in ``$DBWORKER_MODEL_DIR/runs.log`` (appended with
  O_APPEND, outside any transaction, so even runs whose commit was fenced off or whose process
  died show): start/end times, pid, and a run id;
- an ``model_effects`` row per committed step, in the handler's transaction (no unique key, so
  a step committed twice shows as two rows);
- the test counts its resets of an item in ``$DBWORKER_MODEL_DIR/reset-<worker>-<id>`` (one
  byte per reset, written while the item is FAILED, so no handler reads it meanwhile).

``python -m tests.apps.model_app URL --lease S --max-poll S`` runs a coordinator until SIGTERM
(``stop(timeout=10)``), printing "started" once running.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome, Unfinished
from tests.apps import runner

WORKERS = ("alpha", "beta")


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "model_jobs"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    enabled: Mapped[bool] = mapped_column(default=True)
    action: Mapped[str] = mapped_column(sa.String(64), default="finish:0")
    lane: Mapped[str] = mapped_column(sa.String(1), default="a")


class Effect(Base):
    __tablename__ = "model_effects"
    id: Mapped[int] = mapped_column(primary_key=True)
    worker: Mapped[str] = mapped_column(sa.String(16))
    item_id: Mapped[int] = mapped_column(index=True)
    step: Mapped[int] = mapped_column()
    pid: Mapped[int] = mapped_column()
    at: Mapped[float] = mapped_column(sa.Double)


def model_dir() -> Path:
    return Path(os.environ["DBWORKER_MODEL_DIR"])


def log_event(**event: Any) -> None:
    """Append one JSON line to the runs log (one write with O_APPEND: lines never interleave)."""
    fd = os.open(model_dir() / "runs.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(event) + "\n").encode())
    finally:
        os.close(fd)


def resets(worker: str, item_id: int) -> int:
    try:
        return (model_dir() / f"reset-{worker}-{item_id}").stat().st_size
    except FileNotFoundError:
        return 0


def _run(worker: str, job: Job, session: Session) -> Outcome:
    run = uuid.uuid4().hex
    log_event(ev="start", w=worker, i=job.id, pid=os.getpid(), u=run, t=time.time())
    action, _, arg = job.action.partition(":")
    done = session.scalar(
        sa.select(sa.func.count()).select_from(Effect).where(Effect.worker == worker, Effect.item_id == job.id)
    )
    step = int(done or 0) + 1
    if action == "fail" and resets(worker, job.id) < int(arg):
        log_event(ev="end", u=run, t=time.time(), out="raised")
        raise RuntimeError(f"model: {worker} {job.id} asked to fail")
    if action == "finish":
        time.sleep(float(arg))
    session.add(Effect(worker=worker, item_id=job.id, step=step, pid=os.getpid(), at=time.time()))
    outcome: Outcome = Finished()
    if action == "later" and step == 1:
        outcome = Unfinished(after=float(arg))
    log_event(ev="end", u=run, t=time.time(), out=type(outcome).__name__.lower(), step=step)
    return outcome


def run_alpha(job: Job, session: Session) -> Outcome:
    return _run("alpha", job, session)


def run_beta(job: Job, session: Session) -> Outcome:
    return _run("beta", job, session)


def alpha_jobs() -> sa.Select[Any]:
    return sa.select(Job).where(Job.enabled.is_(True))


def beta_jobs() -> sa.Select[Any]:
    return sa.select(Job).where(Job.enabled.is_(True), Job.lane == "b").order_by(Job.id)


def build(url: str, **settings: Any) -> Coordinator:
    """A coordinator on ``url`` with both workers registered (tables not created)."""
    # On SQLite the application waits up to 30 s for the write lock (sqlite3's default is
    # 5 s): two pods, their handler processes and the driver all write to one file.
    options = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    engine = sa.create_engine(url, pool_pre_ping=True, **options)
    coordinator = Coordinator(sessionmaker(engine), database_url=url, **settings)
    coordinator.transactional_worker(name="alpha", source=Job, eligible=alpha_jobs, concurrency=2)(run_alpha)
    coordinator.transactional_worker(name="beta", source=Job, eligible=beta_jobs, concurrency=1)(run_beta)
    return coordinator


def create_tables(url: str) -> Coordinator:
    """Application tables, work tables and wake-up triggers; the coordinator is not started."""
    coordinator = build(url)
    Base.metadata.create_all(coordinator.engine)
    coordinator.create_worker_tables()
    return coordinator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--lease", type=float, default=6)
    parser.add_argument("--max-poll", type=float, default=120)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(process)d %(name)s %(message)s")
    coordinator = build(args.url, lease_seconds=args.lease, poll_seconds=0.25, max_poll_seconds=args.max_poll)
    runner.serve(coordinator)


if __name__ == "__main__":
    main()
