"""The application the acceptance tests run under ``dbworker``: one table, steered by its rows.

Each ``Task`` row says what its handler does (``action``: finish, sleep, fail, exit,
unfinished) and for how long (``seconds``). The module-level ``coordinator`` is built from
``DATABASE_URL`` on first access, so tests can import the models without one.
"""

from __future__ import annotations

import logging
import os
import time
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome, Unfinished

log = logging.getLogger("taskapp")  # the application's own logger, used in its handlers


class Base(DeclarativeBase):
    pass


class Task(Base):
    __tablename__ = "tasks"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(sa.String(20), default="main", index=True)  # offered by the console's filters
    action: Mapped[str] = mapped_column(sa.String(20), default="finish")
    seconds: Mapped[float] = mapped_column(sa.Float, default=0.0)
    result: Mapped[str | None] = mapped_column(sa.String(100), nullable=True)


def handle(task: Task, session: Session) -> Outcome:
    """What the row says: sleep, fail, end the process, or finish (writing ``result``)."""
    if task.action == "sleep":
        session.rollback()  # no read transaction held across the wait
        time.sleep(task.seconds)
    elif task.action == "fail":
        log.warning("task %s is about to fail", task.id)  # kept with its attempt (docs/history.md)
        raise RuntimeError(f"task {task.id} failed on purpose")
    elif task.action == "exit":
        os._exit(3)
    elif task.action == "unfinished":
        task.action = "finish"
        return Unfinished()
    task.result = f"done by {os.getpid()}"
    log.info("task %s handled", task.id)
    return Finished()


def handle_other(task: Task, session: Session) -> Outcome:
    task.result = "other"
    return Finished()


def main_items() -> sa.Select[Any]:
    return sa.select(Task).where(Task.kind == "main").order_by(Task.id)


def other_items() -> sa.Select[Any]:
    return sa.select(Task).where(Task.kind == "other").order_by(Task.id)


def build(url: str) -> Coordinator:
    """A Coordinator with the workers ``main`` (concurrency 2) and ``other`` on ``url``."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    c = Coordinator(
        sessionmaker(engine),
        database_url=url,
        lease_seconds=5,
        poll_seconds=0.05,
        max_poll_seconds=0.5,
    )
    c.transactional_worker(name="main", source=Task, eligible=main_items, concurrency=2)(handle)
    c.transactional_worker(name="other", source=Task, eligible=other_items)(handle_other)
    return c


@cache
def _coordinator() -> Coordinator:
    return build(os.environ["DATABASE_URL"])


def __getattr__(name: str) -> Any:
    # `dbworker run tests.acceptance.app:coordinator` reads this like a module attribute.
    if name == "coordinator":
        return _coordinator()
    raise AttributeError(name)
