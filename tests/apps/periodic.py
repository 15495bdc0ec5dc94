"""A test application for scheduled work: a periodic ``sync`` worker and a ``publish`` worker
whose posts are due at their ``publish_at`` time.

``python -m tests.apps.periodic URL [--every S] [--catch-up N] [--lease S] [--start-on FILE]``
runs its coordinator as a process until SIGTERM (prints "started"); with ``DBW_TEST_HOLD=<dir>`` set,
the first tick a handler process of it meets hangs (until the process is killed), so a
test can kill a coordinator mid-tick.
"""

from __future__ import annotations

import argparse
import datetime as dt
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

import dbworker
from dbworker import Coordinator, Finished
from dbworker.schedules.ticks import Tick
from tests import pooler

_MICRO = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One committed run of a tick: no unique key, so a second commit would show."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64))
    tick_id: Mapped[int] = mapped_column()
    due_at: Mapped[dt.datetime] = mapped_column(_MICRO)
    pid: Mapped[int] = mapped_column()


class Post(Base):
    __tablename__ = "posts"
    id: Mapped[int] = mapped_column(primary_key=True)
    publish_at: Mapped[dt.datetime | None] = mapped_column(_MICRO, nullable=True, index=True)
    draft: Mapped[bool] = mapped_column(default=False)
    published_at: Mapped[dt.datetime | None] = mapped_column(_MICRO, nullable=True)


def sync(tick: Tick, session: Session) -> Finished:
    hold = os.environ.get("DBW_TEST_HOLD")
    if hold:
        try:
            fd = os.open(Path(hold) / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(tick.id).encode())
            os.close(fd)
            while True:  # until the coordinator is killed and this process sees it orphaned
                time.sleep(0.1)
    session.add(Run(name=tick.name, tick_id=tick.id, due_at=tick.due_at, pid=os.getpid()))
    return Finished()


def publish(post: Post, session: Session) -> Finished:
    post.published_at = dbworker.now()
    return Finished()


def not_drafts() -> sa.Select[Any]:
    return sa.select(Post).where(Post.draft.is_(False))


def build(url: str, *, every: float = 2, catch_up: int = 1, lease_seconds: float = 30,
          poll_seconds: float = 0.05, max_poll_seconds: float = 0.5) -> Coordinator:  # fmt: skip
    """The coordinator with both workers registered and every table created; through the
    PgBouncer with its settings in a test whose `db` is ``pgbouncer`` (``tests.pooler``)."""
    engine = sa.create_engine(url, **pooler.engine_options(url))
    Base.metadata.create_all(engine)
    coordinator = Coordinator(
        sessionmaker(engine), database_url=url, lease_seconds=lease_seconds,
        poll_seconds=poll_seconds, max_poll_seconds=max_poll_seconds, **pooler.coordinator_options(url),
    )  # fmt: skip
    coordinator.periodic(name="sync", every=every, catch_up=catch_up, concurrency=2)(sync)
    coordinator.transactional_worker(name="publish", source=Post, eligible=not_drafts, due=Post.publish_at)(publish)
    coordinator.create_worker_tables()
    return coordinator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--every", type=float, default=2)
    parser.add_argument("--catch-up", type=int, default=1)
    parser.add_argument("--lease", type=float, default=30)
    parser.add_argument("--start-on", type=Path, help="print 'built', then start once this file exists")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("dbworker").setLevel(logging.DEBUG)
    faulthandler.register(signal.SIGUSR1)  # a test that waits too long dumps the threads
    coordinator = build(args.url, every=args.every, catch_up=args.catch_up, lease_seconds=args.lease)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if args.start_on is not None:  # imported and migrated: the start itself takes milliseconds
        print("built", flush=True)
        while not args.start_on.exists():
            time.sleep(0.005)
    coordinator.start(["sync"])
    print("started", flush=True)
    while not done.wait(0.2):  # a signal taken by another thread would not end a bare wait()
        pass
    coordinator.stop(timeout=10)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
