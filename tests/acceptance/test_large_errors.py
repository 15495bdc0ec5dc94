"""A handler that raises with a huge message (a hex dump, a token, a row's body) gets its error
stored and its item failed at once: masking the message once took quadratic time (1 MB: about
fifteen minutes), with the item left working and its process spinning until the drain deadline.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, ExecutionStatus, Outcome
from dbworker.sql import tables
from tests.conftest import Database
from tests.helpers import wait_until

HUGE = "0123456789abcdef" * 65_536  # 1 MiB of letters and digits


class Base(DeclarativeBase):
    pass


class Blob(Base):
    __tablename__ = "blobs"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)


def dump(source: Blob, session: Session) -> Outcome:
    raise ValueError(f"cannot parse {HUGE}")


def test_a_megabyte_error_message_is_stored_cut_and_the_item_fails(db: Database) -> None:
    coordinator = Coordinator(sessionmaker(db.engine), database_url=db.url)
    Base.metadata.create_all(db.engine)
    coordinator.transactional_worker(name="blobs", source=Blob)(dump)
    coordinator.create_worker_tables()
    with db.engine.begin() as conn:
        conn.execute(sa.insert(Blob.__table__), [{"id": 1}])
    coordinator.start()
    try:

        def failed() -> dict[str, object] | None:
            with Session(db.engine) as s:
                state = coordinator.workers["blobs"].state(s, 1)
            return state if state is not None and state["execution_status"] is ExecutionStatus.FAILED else None

        state = wait_until(failed, timeout=60, what="the item to fail with its error stored")
    finally:
        coordinator.stop(timeout=30)
    error, trace = str(state["error"]), str(state["traceback"])
    assert error.startswith("cannot parse 0123456789abcdef") and len(error) <= tables.ERROR_MAX_CHARS
    assert "Traceback" in trace and len(trace) <= tables.ERROR_MAX_CHARS
