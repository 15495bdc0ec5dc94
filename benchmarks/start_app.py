"""The application of `benchmarks.pod_start`: one worker whose handler holds its process for
a second and records which process ran the item."""

from __future__ import annotations

import os
import time

from sqlalchemy import Integer, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome


class Base(DeclarativeBase):
    pass


class StartItem(Base):
    __tablename__ = "start_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)


def hold(source: StartItem, session: Session) -> Outcome:
    time.sleep(1.0)  # every item on a process of its own: each process is busy for a second
    source.pid = os.getpid()
    return Finished()


_url = os.environ["DATABASE_URL"]
coordinator = Coordinator(sessionmaker(create_engine(_url)), database_url=_url)
coordinator.transactional_worker(name="start", source=StartItem)(hold)
