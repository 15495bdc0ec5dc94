"""Names at the edge of what the databases hold: every name dbworker creates fits PostgreSQL's
63 bytes and MySQL/MariaDB's 64 characters and never collides; what cannot fit is refused at
registration, naming the limit, never at ``migrate``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from dbworker import Coordinator, Finished
from dbworker.sql import names, traces
from tests import pooler
from tests.apps import basic
from tests.conftest import Database

# Two source tables sharing a 58-character prefix (62 characters each) and keys of different
# names: PostgreSQL cut both trigger functions' names to one, whose body names one key.
LONG = "s" * 58


class Base(DeclarativeBase):
    pass


class One(Base):
    __tablename__ = f"{LONG}_one"
    id: Mapped[int] = mapped_column(primary_key=True)


class Two(Base):
    __tablename__ = f"{LONG}_two"
    code: Mapped[str] = mapped_column(sa.String(20), primary_key=True)  # a key of its own name and type


def handle(row: Any, session: Session) -> Finished:
    return Finished()


def _coordinator(db: Database) -> Coordinator:
    return Coordinator(sessionmaker(db.engine), database_url=db.url, **pooler.coordinator_options(db.url))


def test_the_longest_worker_name_is_created_everywhere_and_a_longer_one_is_refused(db: Database) -> None:
    c = _coordinator(db)
    longest = "w" * names.WORKER_NAME_MAX
    with pytest.raises(ValueError, match=rf"worker name '{longest}x' is 49 characters: use at most 48"):
        c.transactional_worker(name=longest + "x", source=basic.Item)
    with pytest.raises(ValueError, match="use at most 48"):
        c.periodic(name=longest + "x", every=60)
    c.transactional_worker(name=longest, source=basic.Item)(basic.handle)
    basic.create_app_tables(db.engine)
    c.create_worker_tables()
    assert c.upgrade_worker_tables() == []  # all there, under the names it looks for
    inspector = sa.inspect(db.engine)
    table = f"{longest}_work"
    made = [ix["name"] for ix in inspector.get_indexes(table)] + [fk["name"] for fk in inspector.get_foreign_keys(table)]
    if db.backend != "sqlite":  # SQLite has no limit, and keeps the names whole
        assert all(len(str(n).encode()) <= names.IDENTIFIER_MAX for n in made if n), made
    [item] = basic.add_items(db.engine, ["finish"])
    with Session(db.engine) as s:  # the application's own writes still work
        s.execute(sa.delete(basic.Item).where(basic.Item.id == item))
        s.commit()


def test_long_source_tables_sharing_a_prefix_get_their_own_triggers(db: Database) -> None:
    c = _coordinator(db)
    c.transactional_worker(name="one", source=One)(handle)
    c.transactional_worker(name="two", source=Two)(handle)
    Base.metadata.create_all(db.engine, tables=[One.__table__, Two.__table__])  # type: ignore[list-item]
    first = c.upgrade_worker_tables()
    assert {f"wake-up triggers on {LONG}_one", f"wake-up triggers on {LONG}_two"} <= set(first) or {
        f"notify trigger on {LONG}_one", f"notify trigger on {LONG}_two"} <= set(first), first
    assert c.upgrade_worker_tables() == []  # the triggers found current: nothing reinstalled
    # Their trace tables (dbworker.otel): cut names of their own, a foreign key each that fits.
    side = {traces.table_name(One.__tablename__), traces.table_name(Two.__tablename__)}
    assert len(side) == 2 and all(len(n) <= names.IDENTIFIER_MAX for n in side)
    inspector = sa.inspect(db.engine)
    assert side <= set(inspector.get_table_names())
    for name in side:
        [fk] = inspector.get_foreign_keys(name)
        assert fk["options"].get("ondelete", "").upper() == "CASCADE" or db.backend == "sqlite"
    with Session(db.engine) as s:  # the application's INSERTs into both tables still work
        s.add_all([One(id=1), Two(code='a'), One(id=2)])
        s.commit()
        assert s.scalar(sa.select(sa.func.count()).select_from(One)) == 2


def test_derived_names_fit_and_stay_apart() -> None:
    short = "dbworker_notify_items"
    assert names.identifier(short) == short  # names that fit are kept: existing databases keep theirs
    a, b = names.identifier(f"dbworker_notify_{LONG}_one"), names.identifier(f"dbworker_notify_{LONG}_two")
    assert a != b and len(a.encode()) == len(b.encode()) == names.IDENTIFIER_MAX
    assert names.identifier(f"dbworker_notify_{LONG}_one") == a  # the same on every run
    wide = "é" * 40  # 80 bytes: cut on a character boundary
    assert len(names.identifier(wide).encode()) <= names.IDENTIFIER_MAX
