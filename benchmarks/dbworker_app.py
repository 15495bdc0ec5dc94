"""The application dbworker's benchmark pods run: two tables and three registered workers.

`bench_item` rows are the work (one row, one item); `bench_out` receives the write
workload's one row per item. Handlers are module-level so they pickle to dbworker's handler
processes. Only SPEC's public API is used; the adapter (sys_dbworker.py) starts the pods.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from benchmarks import probe
from dbworker import Coordinator, Finished, Outcome, Unfinished


class Base(DeclarativeBase):
    pass


class BenchItem(Base):
    __tablename__ = "bench_item"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


class BenchOut(Base):
    __tablename__ = "bench_out"

    # SQLite only autoincrements an INTEGER PRIMARY KEY.
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    item_id: Mapped[int] = mapped_column(BigInteger)


def noop(source: BenchItem, session: Session) -> Outcome:
    return Finished()


def write(source: BenchItem, session: Session) -> Outcome:
    session.add(BenchOut(item_id=source.id))
    return Finished()


def latency(source: BenchItem, session: Session) -> Outcome:
    probe.handler_started(source.id)
    return Finished()


def again(source: BenchItem, session: Session) -> Outcome:
    """Unfinished at its first call, finished at its second (work resumed later)."""
    if session.scalar(select(BenchOut.id).where(BenchOut.item_id == source.id).limit(1)) is None:
        session.add(BenchOut(item_id=source.id))
        return Unfinished()
    return Finished()


HANDLERS = {"noop": noop, "write": write, "latency": latency, "again": again}


def build_coordinator(url: str, *, concurrency: int) -> Coordinator:
    """The coordinator a pod runs: every benchmark worker registered, library defaults."""
    engine = create_engine(url)
    coordinator = Coordinator(sessionmaker(engine), database_url=url)
    for name, handler in HANDLERS.items():
        coordinator.transactional_worker(name=name, source=BenchItem, concurrency=concurrency)(
            handler
        )
    return coordinator
