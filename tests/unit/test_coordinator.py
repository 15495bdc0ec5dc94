"""Constructor and registration checks: bad input fails at once, naming what to fix."""

from __future__ import annotations

import importlib
import pickle
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from dbworker import Coordinator, ExecutionStatus, Finished, Unfinished
from tests.apps import basic


class Base(DeclarativeBase):
    pass


class TwoKeys(Base):
    __tablename__ = "two_keys"
    a: Mapped[int] = mapped_column(primary_key=True)
    b: Mapped[int] = mapped_column(primary_key=True)


def coordinator(**kwargs: Any) -> Coordinator:
    engine = sa.create_engine("sqlite:///unused.db")
    return Coordinator(sessionmaker(engine), database_url="sqlite:///unused.db", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"lease_seconds": -1}, "lease_seconds"),
        ({"poll_seconds": 0}, "poll_seconds"),
        ({"max_poll_seconds": -2}, "max_poll_seconds"),
        ({"poll_seconds": 5, "max_poll_seconds": 1}, "max_poll_seconds"),
        ({"lease_seconds": "30"}, "lease_seconds"),
        ({"lease_seconds": True}, "lease_seconds"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        coordinator(**kwargs)


def test_defaults_are_the_documented_ones() -> None:
    c = coordinator()
    assert (c.lease_seconds, c.poll_seconds, c.max_poll_seconds) == (30, 0.25, 10)


def test_bad_database_url_is_named() -> None:
    with pytest.raises(ValueError, match="database_url"):
        Coordinator(sessionmaker(), database_url="not a url")


@pytest.mark.parametrize("name", ["", "Items", "1items", "items-x", "items x", None])
def test_worker_names_must_match_the_pattern(name: Any) -> None:
    with pytest.raises(ValueError, match="worker name"):
        coordinator().transactional_worker(name=name, source=basic.Item)


def test_duplicate_worker_name_is_rejected() -> None:
    c = coordinator()
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    with pytest.raises(ValueError, match="already registered"):
        c.transactional_worker(name="items", source=basic.Item)(basic.handle)


@pytest.mark.parametrize("source", [TwoKeys, object, "items", basic.Item.__table__])
def test_source_must_be_a_mapped_class_with_one_key(source: Any) -> None:
    with pytest.raises(ValueError, match="source"):
        coordinator().transactional_worker(name="items", source=source)


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, True, "2"])
def test_concurrency_must_be_a_positive_integer(concurrency: Any) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        coordinator().transactional_worker(name="items", source=basic.Item, concurrency=concurrency)


def test_decorator_returns_the_function_unchanged() -> None:
    c = coordinator()
    assert c.transactional_worker(name="items", source=basic.Item)(basic.handle) is basic.handle
    assert c.workers["items"].concurrency == 1


def test_work_table_is_in_the_source_metadata_with_the_documented_columns() -> None:
    c = coordinator()
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    table = basic.Base.metadata.tables["items_work"]
    assert c.workers["items"].table is table
    assert [col.name for col in table.columns] == [
        "source_id", "execution_status", "claim_token", "lease_expires_at", "error",
        "attempts", "not_before", "traceback", "claimed_by", "ended_at",
        "progress_fraction", "progress_note", "progress_at", "changed_at",
    ]
    assert table.c.source_id.primary_key
    assert {fk.column for fk in table.c.source_id.foreign_keys} == {basic.Item.__table__.c.id}
    assert table.c.claim_token.type.length == 36
    assert table.c.lease_expires_at.index


def test_unknown_worker_raises_key_error() -> None:
    c = coordinator()
    with pytest.raises(KeyError):
        c.workers["nope"]
    with pytest.raises(KeyError):
        c.has_execution_status(worker="nope", source_id=1, statuses=[ExecutionStatus.FINISHED])


def test_registering_after_start_is_a_runtime_error(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    c = basic.build(url, concurrency=1)
    c.start()
    try:
        with pytest.raises(RuntimeError):
            c.transactional_worker(name="more", source=basic.Item)(basic.handle)
        with pytest.raises(RuntimeError):
            c.start()
    finally:
        c.stop()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:x?mode=memory&uri=true"])
def test_in_memory_sqlite_is_refused_at_start(url: str) -> None:
    c = Coordinator(sessionmaker(sa.create_engine("sqlite://")), database_url=url)
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    with pytest.raises(ValueError, match="in-memory"):
        c.start()


def _local_handler_coordinator(tmp_path: Any, **kwargs: Any) -> Coordinator:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    return Coordinator(sessionmaker(sa.create_engine(url)), database_url=url, **kwargs)


def test_unpicklable_handler_is_refused_at_registration(tmp_path: Any) -> None:
    c = _local_handler_coordinator(tmp_path)

    def local(source: Any, session: Any) -> Finished:
        return Finished()

    for handler in (local, lambda source, session: Finished()):
        for register in (c.transactional_worker(name="items", source=basic.Item), c.periodic(name="p", every=60)):
            with pytest.raises(ValueError, match=r"worker '(items|p)': its handler .*(local|lambda).* cannot be pickled.*module-level"):
                register(handler)
    assert c.registrations() == []


def test_a_handler_decorated_at_module_level_registers_and_pickles(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The decorator runs before the module binds the function's name, so pickling it by
    # reference there would fail every application written the README's way.
    (tmp_path / "decorated_app.py").write_text(
        "import sqlalchemy as sa\n"
        "from sqlalchemy.orm import sessionmaker\n"
        "from dbworker import Coordinator, Finished\n"
        "from tests.apps import basic\n"
        f"URL = 'sqlite:///{tmp_path / 'app.db'}'\n"
        "coordinator = Coordinator(sessionmaker(sa.create_engine(URL)), database_url=URL)\n"
        "@coordinator.transactional_worker(name='items', source=basic.Item)\n"
        "def handle(item, session):\n"
        "    return Finished()\n"
        "@coordinator.periodic(name='tick', every=60)\n"
        "def tick(tick, session):\n"
        "    return Finished()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("decorated_app")
    assert [r.name for r in module.coordinator.registrations()] == ["items", "tick"]
    assert pickle.loads(pickle.dumps(module.handle)) is module.handle


def test_unpicklable_engine_options_are_refused_at_start(tmp_path: Any) -> None:
    c = _local_handler_coordinator(tmp_path, engine_options={"creator": lambda: None})
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    with pytest.raises(ValueError, match="pickled"):
        c.start()


def test_outcomes_are_values_and_statuses_are_strings() -> None:
    assert Finished() == Finished() and Unfinished() == Unfinished()
    assert pickle.loads(pickle.dumps(Finished())) == Finished()
    assert [s.value for s in ExecutionStatus] == ["working", "unfinished", "finished", "failed"]
    assert ExecutionStatus("failed") is ExecutionStatus.FAILED and ExecutionStatus.FAILED == "failed"


def test_has_execution_status_opens_no_connection() -> None:
    engine = sa.create_engine("postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    c = Coordinator(sessionmaker(engine), database_url=engine.url)
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    expr = c.has_execution_status(worker="items", source_id=basic.Item.id, statuses=[ExecutionStatus.FINISHED])
    assert "items_work" in str(sa.select(basic.Item.id).where(expr))
    empty = c.has_execution_status(worker="items", source_id=1, statuses=[])
    assert str(empty.compile(compile_kwargs={"literal_binds": True})) in ("false", "0 = 1")


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"retry": 3}, r"^retry must be a dbworker.Retry"),
        ({"retry": {"max_attempts": 3}}, r"^retry must be a dbworker.Retry"),
        ({"timeout": 0}, r"^timeout must be None or a positive number of seconds"),
        ({"timeout": "60"}, r"^timeout must be None or a positive number of seconds"),
        ({"timeout": float("inf")}, r"^timeout must be None or a positive number of seconds"),
    ],
)
def test_bad_lifecycle_arguments_fail_at_registration_naming_them(kwargs: dict[str, Any], named: str) -> None:
    c = coordinator()
    with pytest.raises(ValueError, match=named):
        c.transactional_worker(name="items", source=basic.Item, **kwargs)
    assert "items" not in c.workers  # nothing registered
