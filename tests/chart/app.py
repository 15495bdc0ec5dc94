"""A tiny dbworker application for the chart tests: one SQLite table of items, a sync and an
async worker.

`dbworker run tests.chart.app:coordinator` runs it; the database file comes from the
environment variable CHART_APP_DATABASE_URL, as a real application's URL would. Items whose
`fail` flag is set make the handler raise, so the failure series carry data.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome

ENV = "CHART_APP_DATABASE_URL"


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "chart_item"

    id: Mapped[int] = mapped_column(primary_key=True)
    fail: Mapped[bool] = mapped_column(default=False)


def database_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        raise RuntimeError(f"{ENV} is not set: point it at a SQLite file, e.g. sqlite:////tmp/app.sqlite")
    return url


engine = sa.create_engine(database_url())
coordinator = Coordinator(sessionmaker(engine), database_url=database_url(), poll_seconds=0.1, max_poll_seconds=0.5)


@coordinator.transactional_worker(name="touch", source=Item, concurrency=2)
def touch(item: Item, session: Session) -> Outcome:
    if item.fail:
        raise RuntimeError(f"item {item.id} asked to fail")
    return Finished()


# An async worker on the same rows, so the async panels (event-loop lag, items in flight) have
# series to read.
@coordinator.transactional_worker(name="await", source=Item, concurrency=4)
async def await_item(item: Item, session: AsyncSession) -> Outcome:
    return Finished()
