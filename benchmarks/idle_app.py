"""The application of the idle-fleet benchmark (`benchmarks.idle_fleet`): one source table,
two workers, as `dbworker run benchmarks.idle_app:coordinator` loads it.

`idle_item` rows carry a `kind` and a `priority`, indexed together. `unordered` takes every
row (`eligible=None`); `ordered` takes rows of kind 'b', highest priority first (an ordered,
filtered `eligible` on an indexed column). Handlers do nothing: the benchmark measures a
fleet with no work. The database URL comes from DATABASE_URL (the application's business,
as dbworker's pod command leaves it).
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench"
ORDERED_KIND = "b"


class Base(DeclarativeBase):
    pass


class IdleItem(Base):
    __tablename__ = "idle_item"
    __table_args__ = (Index("ix_idle_item_kind_priority", "kind", "priority"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(8), nullable=False)
    priority: Mapped[int] = mapped_column(Integer, nullable=False)


def unordered(source: IdleItem, session: Session) -> Outcome:
    return Finished()


def ordered(source: IdleItem, session: Session) -> Outcome:
    return Finished()


def ordered_eligible() -> Any:
    return (
        select(IdleItem).where(IdleItem.kind == ORDERED_KIND).order_by(IdleItem.priority.desc())
    )


def build(url: str) -> Coordinator:
    """The application's coordinator: library defaults, the two workers registered."""
    coordinator = Coordinator(sessionmaker(create_engine(url)), database_url=url)
    coordinator.transactional_worker(name="unordered", source=IdleItem)(unordered)
    coordinator.transactional_worker(name="ordered", source=IdleItem, eligible=ordered_eligible)(
        ordered
    )
    return coordinator


coordinator = build(os.environ.get("DATABASE_URL", DEFAULT_URL))
