"""Limit: its checks at registration, and the pure rules the claim engine applies."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from dbworker import Coordinator, Finished, Limit
from dbworker.limits import KEY_CHARS, Kind, check_limits, fair_limit, key_text, kinds, per_key


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[int] = mapped_column()
    region: Mapped[str] = mapped_column(sa.String(20))


class Other(Base):
    __tablename__ = "others"
    id: Mapped[int] = mapped_column(primary_key=True)


def handle(order: Order, session: object) -> Finished:
    return Finished()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "concurrency= or rate="),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -3}, "concurrency"),
        ({"concurrency": 2.0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"concurrency": 10**9}, "concurrency"),
        ({"rate": 0}, "rate"),
        ({"rate": "10"}, "rate"),
        ({"rate": 10**9}, "rate"),
        ({"rate": 1, "per": 0}, "per"),
        ({"rate": 1, "per": -1.0}, "per"),
        ({"rate": 1, "per": float("nan")}, "per"),
        ({"rate": 1, "per": float("inf")}, "per"),
        ({"rate": 1, "per": 10**9}, "per"),
        ({"rate": 1, "per": 1e-6}, "per"),
        ({"rate": 1, "per": "1"}, "per"),
    ],
)
def test_bad_numbers_raise_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Limit(**kwargs)  # type: ignore[arg-type]


def test_good_limits_keep_their_numbers() -> None:
    lim = Limit(key=Order.customer_id, concurrency=2, rate=10, per=2)
    assert (lim.concurrency, lim.rate, lim.per, lim.keyed) == (2, 10, 2.0, True)
    assert Limit(rate=5).per == 1.0 and not Limit(rate=5).keyed


def _coordinator() -> Coordinator:
    return Coordinator(sessionmaker(sa.create_engine("sqlite://")), database_url="sqlite:///x.db")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (Limit(concurrency=1), "list of dbworker.Limit"),
        ("concurrency=2", "list of dbworker.Limit"),
        ([{"concurrency": 2}], r"only dbworker.Limit"),
        ([Limit(key="customer_id", concurrency=2)], "column or SQL expression"),
        ([Limit(key=Other.id, concurrency=2)], "others"),
    ],
)
def test_registration_refuses_bad_limits(limits: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _coordinator().transactional_worker(name="orders", source=Order, limits=limits)  # type: ignore[arg-type]


def test_registration_keeps_the_limits() -> None:
    c = _coordinator()
    given = [Limit(key=Order.customer_id, concurrency=2), Limit(key=sa.func.lower(Order.region), rate=3)]
    c.transactional_worker(name="orders", source=Order, limits=given)(handle)
    assert c.registrations()[0].limits == tuple(given)
    assert "orders_slots" in Order.metadata.tables


def test_no_limits_is_an_empty_tuple() -> None:
    assert check_limits(None, Order.__table__) == ()
    assert check_limits([], Order.__table__) == ()


def test_kinds_put_concurrency_before_rate() -> None:
    limits = [Limit(rate=5, per=2.0), Limit(key=Order.customer_id, concurrency=2, rate=3)]
    assert kinds(limits) == [Kind(2, 1, 2), Kind(1, 0, 5, 2.0), Kind(3, 1, 3, 1.0)]


def test_fairness_follows_the_first_keyed_limit() -> None:
    assert fair_limit([Limit(concurrency=3)]) is None
    assert fair_limit([Limit(concurrency=3), Limit(key=Order.region, rate=2), Limit(key=Order.id, rate=1)]) == 1


def test_a_round_looks_at_no_more_rows_of_a_key_than_it_could_start() -> None:
    keyed = [Limit(key=Order.customer_id, concurrency=2, rate=5)]
    assert per_key(keyed, 0, 10) == 2
    assert per_key(keyed, 0, 1) == 1
    assert per_key([Limit(concurrency=3)], None, 10) == 10


def test_key_text_is_bounded_and_distinct() -> None:
    assert key_text(None) == "" and key_text(42) == "42"
    long_a, long_b = "a" * 500, "a" * 499 + "b"
    assert len(key_text(long_a)) == KEY_CHARS
    assert key_text(long_a) != key_text(long_b)
    assert key_text("x" * KEY_CHARS) == "x" * KEY_CHARS


def test_a_worker_with_limits_waits_for_its_own_items_in_other_pods() -> None:
    from dbworker.wakeups.dependencies import awaited, dependency_map

    c = _coordinator()
    c.transactional_worker(name="orders", source=Order, limits=[Limit(concurrency=1)])(handle)
    c.transactional_worker(name="plain", source=Other)(handle)
    deps = dependency_map(c.registrations())
    assert deps == {"orders": frozenset({"orders"}), "plain": frozenset()}
    assert awaited(deps) == frozenset({"orders"})
