"""An application whose source key is stored through a TypeDecorator (as UUID or enum keys are).

The key's Python value ("order-7") differs from the stored one ("ORDER-7"), so a claim path
that skipped the type's processing would hand handlers a key that loads no row.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbworker import Finished, Outcome


class StoredUpper(sa.TypeDecorator[str]):
    """Lower case in Python, upper case in the database."""

    impl = sa.String(40)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else str(value).upper()

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else str(value).lower()


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    code: Mapped[str] = mapped_column(StoredUpper(), primary_key=True)
    done: Mapped[bool] = mapped_column(default=False)


def ship(source: Order, session: Session) -> Outcome:
    if source.code != source.code.lower():
        raise AssertionError(f"the handler got a stored key: {source.code!r}")
    source.done = True
    return Finished()
