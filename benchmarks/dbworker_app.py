"""The application dbworker's benchmark pods run: its tables and registered workers.

`bench_item` rows are the work (one row, one item) of `noop`, `write`, `latency`, `again`
and the I/O-bound `io` (an `async def` handler) and `io_sync`; `bench_out` receives the
write and I/O workloads' one row per item. Issue 15's two pick-up
cases have tables of their own: `bench_gate` rows are the `enable` worker's, eligible only
once `ready` is true (a row enabled behind the sweep's cursor); `bench_dep` rows go through
`dep_first`, then `dep_second`, whose `eligible` waits for `dep_first`'s FINISHED through
`coordinator.has_execution_status(...)` (a dependent item). Handlers are module-level so
they pickle to dbworker's handler processes. Only SPEC's public API is used; the adapter
(sys_dbworker.py) starts the pods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Boolean, Integer, create_engine, select, true
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from benchmarks import io_app, probe
from dbworker import Coordinator, ExecutionStatus, Finished, Outcome, Unfinished

if TYPE_CHECKING:  # SQLAlchemy's asyncio needs greenlet; only the io worker's processes use it
    from sqlalchemy.ext.asyncio import AsyncSession


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


class BenchGate(Base):
    """A row of the `enable` worker: claimable once `ready` (an UPDATE sets it)."""

    __tablename__ = "bench_gate"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ready: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=true())


class BenchDep(Base):
    """A row of `dep_first`, then of `dep_second` (which waits for `dep_first`'s FINISHED)."""

    __tablename__ = "bench_dep"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


def noop(source: BenchItem, session: Session) -> Outcome:
    return Finished()


def write(source: BenchItem, session: Session) -> Outcome:
    session.add(BenchOut(item_id=source.id))
    return Finished()


def latency(source: BenchItem, session: Session) -> Outcome:
    probe.handler_started(source.id)
    return Finished()


async def io(source: BenchItem, session: AsyncSession) -> Outcome:
    """Await the slow HTTP server, then write one row (issue 28's I/O-bound workload)."""
    await io_app.fetch(source.id)
    session.add(BenchOut(item_id=source.id))
    return Finished()


def io_sync(source: BenchItem, session: Session) -> Outcome:
    """The same work as a sync handler (a process per item in flight)."""
    io_app.fetch_sync(source.id)
    session.add(BenchOut(item_id=source.id))
    return Finished()


def again(source: BenchItem, session: Session) -> Outcome:
    """Unfinished at its first call, finished at its second (work resumed later)."""
    if session.scalar(select(BenchOut.id).where(BenchOut.item_id == source.id).limit(1)) is None:
        session.add(BenchOut(item_id=source.id))
        return Unfinished()
    return Finished()


def enable(source: BenchGate, session: Session) -> Outcome:
    probe.handler_started(source.id)
    return Finished()


def dep_first(source: BenchDep, session: Session) -> Outcome:
    # Its last act before the outcome's commit: the dependent's wait is timed from here.
    probe.handler_finished(source.id)
    return Finished()


def dep_second(source: BenchDep, session: Session) -> Outcome:
    probe.handler_started(source.id)
    return Finished()


HANDLERS = {"noop": noop, "write": write, "latency": latency, "again": again, "io_sync": io_sync}
# The pod's worker names per benchmark kind (default: the kind itself).
POD_WORKERS = {"dependent": ["dep_first", "dep_second"]}


def build_coordinator(url: str, *, concurrency: int, history: bool = True, processes: int = 1,
                      engine_options: dict[str, Any] | None = None) -> Coordinator:  # fmt: skip
    """The coordinator a pod runs: every benchmark worker registered, library defaults
    (``history=False``: no attempt history, ``history_attempts=0``); ``processes`` is the
    async ``io`` worker's handler processes (its ``concurrency`` items spread over them),
    ``engine_options`` the handler processes' engine options (None: the defaults)."""
    engine = create_engine(url)
    options: dict[str, Any] = {} if history else {"history_attempts": 0}
    if engine_options:
        options["engine_options"] = engine_options
    coordinator = Coordinator(sessionmaker(engine), database_url=url, **options)
    for name, handler in HANDLERS.items():
        coordinator.transactional_worker(name=name, source=BenchItem, concurrency=concurrency)(
            handler
        )

    coordinator.transactional_worker(name="io", source=BenchItem, concurrency=concurrency, processes=processes)(io)

    def gate_ready() -> Any:
        return select(BenchGate).where(BenchGate.ready)

    def first_finished() -> Any:
        return select(BenchDep).where(
            coordinator.has_execution_status(
                worker="dep_first", source_id=BenchDep.id, statuses=[ExecutionStatus.FINISHED]
            )
        )

    coordinator.transactional_worker(
        name="enable", source=BenchGate, eligible=gate_ready, concurrency=concurrency
    )(enable)
    coordinator.transactional_worker(name="dep_first", source=BenchDep, concurrency=concurrency)(
        dep_first
    )
    coordinator.transactional_worker(
        name="dep_second", source=BenchDep, eligible=first_finished, concurrency=concurrency
    )(dep_second)
    return coordinator
