"""A small application for the library's tests: items whose ``action`` says what the handler does.

Actions: ``finish``; ``fail``; ``sleep:S`` then finish; ``exit:N`` (os._exit); ``kill``
(SIGKILL itself); ``unfinished:K`` (Unfinished until called K times); ``commit`` (calls
session.commit); ``sqlcommit`` (writes an ``outputs`` row of run 0, then runs a ``COMMIT``
statement and goes on); ``bad`` (returns a wrong value); ``wait`` (finishes once a ``go`` file exists); ``flushwait`` (the same after flushing a write);
``dbwait`` (finishes once the item's ``release`` flag is set, read in fresh transactions);
``flaky:K`` (raises OSError until its K-th attempt); ``value`` (raises ValueError); ``killonce``
(SIGKILLs itself on its first attempt); ``hang`` (ignores SIGTERM and never returns);
``later:S`` (``Unfinished(after=S)`` on its first run, then finishes); ``refused`` (raises
ConnectionRefusedError, as an HTTP client would); ``progress`` (reports 0.5 "half way", then
waits like ``dbwait``); ``progressfail`` (reports 0.25 "quarter", then raises). Attempts are counted
by ``started`` rows, which survive the rollback of a failed attempt.
Every run that commits writes one ``outputs`` row whose unique key is the item and the run
number, so a second commit of the same run would violate the constraint.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome, Retry, Unfinished, report_progress
from tests import pooler


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(primary_key=True)
    action: Mapped[str] = mapped_column(sa.String(255), default="finish")
    runs: Mapped[int] = mapped_column(default=0)
    ready: Mapped[bool] = mapped_column(default=True)
    release: Mapped[bool] = mapped_column(default=False)
    priority: Mapped[int] = mapped_column(default=0)


class Output(Base):
    __tablename__ = "outputs"
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column()
    run: Mapped[int] = mapped_column()
    pid: Mapped[int] = mapped_column()
    worker: Mapped[str] = mapped_column(sa.String(32), default="items")
    __table_args__ = (sa.UniqueConstraint("worker", "item_id", "run"),)


class Started(Base):
    """One row per handler start (committed separately), to see what ran where."""

    __tablename__ = "started"
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column()
    pid: Mapped[int] = mapped_column()
    at: Mapped[float] = mapped_column(sa.Double)  # MySQL FLOAT is single precision


def _mark_started(session: Session, item_id: int) -> None:
    # Committed through a separate engine so tests can see a handler is running.
    engine = session.get_bind()
    with Session(engine) as s:
        s.add(Started(item_id=item_id, pid=os.getpid(), at=time.time()))
        s.commit()


def handle(item: Item, session: Session) -> Outcome:
    action, _, arg = item.action.partition(":")
    if action in ("sleep", "wait", "flushwait", "dbwait", "kill", "exit", "flaky", "killonce", "hang", "later", "value", "refused"):
        _mark_started(session, item.id)
    item.runs += 1
    if action == "flaky" and _starts(session, item.id) < int(arg):
        raise OSError(f"item {item.id} is flaky")
    if action == "value":
        raise ValueError(f"item {item.id} has a bad value")
    if action == "refused":  # what an HTTP client raises: the handler's error, not the database's
        raise ConnectionRefusedError(f"item {item.id}: connection refused")
    if action == "killonce" and _starts(session, item.id) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    if action == "later" and item.runs == 1:
        return Unfinished(after=float(arg))
    if action == "progressfail":
        report_progress(0.25, "quarter")
        raise RuntimeError(f"item {item.id} failed after reporting progress")
    if action == "progress":
        report_progress(fraction=0.5, note="half way")
        action = "dbwait"
    if action in ("log", "logfail"):  # log records kept with the attempt (at WARNING: kept unconfigured)
        for n in range(1, int(arg or 1) + 1):
            logging.getLogger("tests.items").warning("item %d record %d via postgresql://bob:hunter22@db/x", item.id, n)
        if action == "logfail":
            session.flush()  # the handler's writes roll back; its log records stay
            raise RuntimeError(f"item {item.id} logged and failed")
    if action == "fail":
        raise RuntimeError(f"item {item.id} asked to fail")
    if action == "sleep":
        time.sleep(float(arg))
    elif action == "exit":
        os._exit(int(arg))
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "commit":
        session.commit()
    elif action == "sqlcommit":  # commits behind dbworker's back, then carries on
        session.add(Output(item_id=item.id, run=0, pid=os.getpid()))
        session.flush()
        session.execute(sa.text("COMMIT"))
    elif action == "bad":
        return "done"  # type: ignore[return-value]
    elif action in ("wait", "flushwait"):
        if action == "flushwait":  # writes now (on SQLite: takes the only write lock) and runs on
            session.flush()
        while not Path(arg).exists():
            time.sleep(0.02)
    elif action == "dbwait":
        item_id = item.id
        session.rollback()
        while True:
            with Session(session.get_bind()) as s:
                if s.get(Item, item_id).release:  # type: ignore[union-attr]
                    break
            time.sleep(0.05)
        item = session.get(Item, item_id)  # type: ignore[assignment]
        item.runs += 1
    session.add(Output(item_id=item.id, run=item.runs, pid=os.getpid()))
    if action == "unfinished" and item.runs < int(arg):
        return Unfinished()
    return Finished()


def handle_then(item: Item, session: Session) -> Outcome:
    """A second worker's handler: one ``outputs`` row under the worker name ``then``."""
    session.add(Output(item_id=item.id, run=1, pid=os.getpid(), worker="then"))
    return Finished()


def _starts(session: Session, item_id: int) -> int:
    with Session(session.get_bind()) as s:
        return int(s.scalar(sa.select(sa.func.count()).select_from(Started).where(Started.item_id == item_id)) or 0)


def create_app_tables(engine: sa.Engine) -> None:
    Base.metadata.create_all(engine, tables=[Item.__table__, Output.__table__, Started.__table__])


def build(
    url: str,
    *,
    concurrency: int = 2,
    eligible: Any = None,
    app_tables: bool = True,
    work_tables: bool = True,
    retry: Retry | None = None,
    timeout: float | None = None,
    **settings: Any,
) -> Coordinator:
    """A coordinator on ``url`` with worker ``items`` (application and work tables created);
    through PgBouncer with its settings in a test whose `db` is ``pgbouncer`` (``tests.pooler``)."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    settings = {**pooler.coordinator_options(url), **settings}
    coordinator = Coordinator(sessionmaker(engine), database_url=url, **settings)
    if app_tables:
        create_app_tables(coordinator.engine)  # its engine: pooler settings applied
    coordinator.transactional_worker(
        name="items", source=Item, eligible=eligible, concurrency=concurrency, retry=retry, timeout=timeout
    )(handle)
    if work_tables:
        coordinator.create_worker_tables()
    return coordinator


def ready_items() -> sa.Select[Any]:
    return sa.select(Item).where(Item.ready.is_(True)).order_by(Item.priority.desc(), Item.id)


def add_items(url_or_engine: Any, actions: list[str], **fields: Any) -> list[int]:
    engine = sa.create_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    with Session(engine) as s:
        items = [Item(action=a, **fields) for a in actions]
        s.add_all(items)
        s.commit()
        return [i.id for i in items]
