"""The application of the fleet benchmark (`benchmarks.fleet`): one source table, one worker,
as `dbworker run benchmarks.fleet_app:coordinator` loads it.

The handler does nothing: the benchmark measures what claiming and recording cost the one
database a fleet shares. The URL comes from DATABASE_URL; behind a transaction pooler
(DBWORKER_TRANSACTION_POOLER=true, which the command also reads) the application's own
engine prepares no statements either.
"""

from __future__ import annotations

import os

from sqlalchemy import BigInteger, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Outcome

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench_fleet"


class Base(DeclarativeBase):
    pass


class FleetItem(Base):
    __tablename__ = "fleet_item"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


def noop(source: FleetItem, session: Session) -> Outcome:
    return Finished()


def build(url: str) -> Coordinator:
    pooled = os.environ.get("DBWORKER_TRANSACTION_POOLER", "").lower() in ("1", "true", "yes")
    engine = create_engine(url, connect_args={"prepare_threshold": None} if pooled else {})
    coordinator = Coordinator(sessionmaker(engine), database_url=url)
    coordinator.transactional_worker(name="fleet", source=FleetItem)(noop)
    return coordinator


coordinator = build(os.environ.get("DATABASE_URL", DEFAULT_URL))
