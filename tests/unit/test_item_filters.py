"""The console's item filter (``dbworker.console.filters``): parsed and checked without a server;
each wrong parameter is named, with the fix."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker.console import filters
from dbworker.sql import tables


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders_filters"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[int] = mapped_column(sa.Integer, index=True)
    small: Mapped[int] = mapped_column(sa.SmallInteger, index=True)
    region: Mapped[str] = mapped_column(sa.String(8), index=True)
    placed_at: Mapped[dt.datetime] = mapped_column(index=True)
    day: Mapped[dt.date] = mapped_column(sa.Date, unique=True)
    paid: Mapped[bool] = mapped_column(index=True)
    note: Mapped[str] = mapped_column(sa.String(50))  # not indexed: not offered
    api_token: Mapped[str] = mapped_column(sa.String(50), index=True)  # a secret: never offered
    blob: Mapped[bytes] = mapped_column(sa.LargeBinary, index=True)  # not compared here
    __table_args__ = (sa.Index("ix_orders_filters_amount_region", "amount", "region"),)
    amount: Mapped[float] = mapped_column(sa.Float)


PG = postgresql.dialect()


def parse(**params: str) -> filters.ItemFilter:
    return filters.parse(params.items(), Order, PG)


def test_offered_columns_are_the_indexed_ones_of_known_types_and_not_secrets() -> None:
    assert [c.name for c in filters.offered(Order)] == ["id", "customer", "small", "region", "placed_at", "day",
                                                      "paid", "amount"]  # fmt: skip


def test_a_full_filter_is_parsed_and_gives_its_parameters_back() -> None:
    f = parse(**{"status": "failed", "since": "2026-12-02T10:00:00+01:00", "until": "2026-12-02T12:00:00",
                 "error": "50%_off", "col.customer": "42", "col.placed_at.gte": "2026-01-01T00:00:00Z",
                 "col.paid": "true", "col.amount.lte": "9.5", "col.day": "2026-12-01", "col.region": "eu"})  # fmt: skip
    assert f.status == "failed" and f.since == dt.datetime(2026, 12, 2, 9) and f.until == dt.datetime(2026, 12, 2, 12)
    values = {t.parameter: t.value for t in f.columns}
    assert values == {"col.customer": 42, "col.placed_at.gte": dt.datetime(2026, 1, 1), "col.paid": True,
                      "col.amount.lte": 9.5, "col.day": dt.date(2026, 12, 1), "col.region": "eu"}  # fmt: skip
    again = filters.parse(f.params(), Order, PG)
    assert again == f and not f.empty and f.needs_source
    work = tables.work_table("orders_filters_w", Order)
    conditions = f.conditions(work, Order.__table__)  # type: ignore[arg-type]
    sql = " AND ".join(str(c.compile(dialect=PG)) for c in conditions)
    assert "changed_at >=" in sql and "changed_at <=" in sql and "ILIKE" in sql and "orders_filters.customer =" in sql
    assert filters.parse([("before", "3"), ("id", "x"), ("col.customer", "")], Order, PG).empty  # empty values: no filter


@pytest.mark.parametrize(("params", "field", "words"), [
    ({"status": "done"}, "status", "is not one of failed, working"),
    ({"since": "yesterday"}, "since", "not an ISO 8601 time"),
    ({"since": "2026-12-02", "until": "2026-12-01"}, "until", "the range is empty"),
    ({"error": "x" * 201}, "error", "at most 200 characters"),
    ({"col.nope": "1"}, "col.nope", "has no column 'nope' to filter on (offered, the indexed ones: id, customer"),
    ({"col.note": "x"}, "col.note", "has no column 'note'"),
    ({"col.api_token": "x"}, "col.api_token", "has no column 'api_token'"),
    ({"col.customer.between": "1"}, "col.customer.between", "unknown comparison 'between'"),
    ({"col.customer": "4x"}, "col.customer", "'4x' is not an integer"),
    ({"col.customer": "99999999999"}, "col.customer", "out of the range of column customer (-2147483648..2147483647)"),
    ({"col.small.gte": "40000"}, "col.small.gte", "out of the range"),
    ({"col.customer.gte": "10", "col.customer.lte": "2"}, "col.customer.lte", "the range is empty"),
    ({"col.amount": "nan"}, "col.amount", "not a finite number"),
    ({"col.amount": "1e999"}, "col.amount", "not a finite number"),
    ({"col.region": "x" * 9}, "col.region", "longer than column region holds (8 characters)"),
    ({"col.paid": "yes"}, "col.paid", "use true or false"),
    ({"col.day": "2026-13-01"}, "col.day", "use YYYY-MM-DD"),
    ({"col.placed_at.lte": "9999-12-31T23:59:59-01:00"}, "col.placed_at.lte", "out of range once converted"),
    ({f"col.{n}": "1" for n in ("id", "customer", "small", "amount")} | {f"col.{n}.gte": "1" for n in
      ("id", "customer", "small", "amount")} | {"col.id.lte": "5"}, "col.*", "at most 8 column filters"),
])  # fmt: skip
def test_bad_parameters_are_refused_naming_the_field(params: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(filters.FilterError, match=field.replace(".", r"\.").replace("*", r"\*")) as caught:
        parse(**params)
    assert caught.value.field == field and words in str(caught.value)


def test_a_parameter_given_twice_is_refused() -> None:
    with pytest.raises(filters.FilterError, match="status: given twice"):
        filters.parse([("status", "failed"), ("status", "working")], Order, PG)


def test_integer_ranges_follow_the_database() -> None:
    big = [("col.customer", str(2**40))]
    assert filters.parse(big, Order, sqlite.dialect()).columns[0].value == 2**40  # SQLite integers are 64-bit
    with pytest.raises(filters.FilterError, match="out of the range"):
        filters.parse(big, Order, mysql.dialect())
