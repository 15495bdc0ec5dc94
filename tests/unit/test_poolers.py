"""Transaction-pooler settings: checked at once without echoing URLs, applied to every engine."""

from __future__ import annotations

import pickle
import types
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

from dbworker import Coordinator
from dbworker.child import ChildConfig, Runner
from dbworker.pod import app, options, termination
from dbworker.sql import poolers
from tests.apps import basic

PG = "postgresql+psycopg://app:s3cret@pgbouncer:6432/app"
DIRECT = "postgresql+psycopg://app:l1sten@db:5432/app"


def pg_coordinator(**kwargs: Any) -> Coordinator:
    engine = sa.create_engine(PG)  # never connects in these tests
    return Coordinator(sessionmaker(engine), database_url=PG, **kwargs)


@pytest.mark.parametrize(
    ("url", "kwargs", "message"),
    [
        ("sqlite:///x.db", {"transaction_pooler": True}, "transaction_pooler=True is for PostgreSQL"),
        (PG, {"transaction_pooler": "yes"}, "transaction_pooler must be True or False"),
        (PG, {"listen_url": "not a url"}, "listen_url is not a database URL"),
        (PG, {"listen_url": "mysql+pymysql://app:l1sten@db/app"}, "listen_url must be a PostgreSQL URL with the psycopg driver"),
        (PG, {"listen_url": "postgresql+psycopg2://app:l1sten@db/app"}, "listen_url must be a PostgreSQL URL with the psycopg driver"),
        ("sqlite:///x.db", {"listen_url": DIRECT}, "listen_url is the connection for PostgreSQL's LISTEN"),
    ],
)
def test_bad_pooler_settings_name_the_field_and_never_the_password(url: str, kwargs: dict[str, Any], message: str) -> None:
    engine = sa.create_engine(url)
    with pytest.raises(ValueError, match=message) as info:
        Coordinator(sessionmaker(engine), database_url=url, **kwargs)
    assert "l1sten" not in str(info.value) and "s3cret" not in str(info.value)


def test_the_listen_url_is_masked_and_its_password_is_a_secret() -> None:
    c = pg_coordinator(transaction_pooler=True, listen_url=DIRECT)
    assert c.transaction_pooler is True
    assert c.listen_url == "postgresql+psycopg://app:***@db:5432/app"
    assert set(c.secrets) == {"s3cret", "l1sten"}


def test_configure_sets_the_pooler_settings_before_start() -> None:
    c = pg_coordinator()
    c.configure(transaction_pooler=True)
    c.configure(listen_url=DIRECT)
    assert c.transaction_pooler and c.listen_url is not None and "l1sten" in c.secrets
    c.configure(transaction_pooler=False)
    assert not c.transaction_pooler and c.listen_url is not None  # the other one kept


def test_the_coordinators_engine_never_prepares_in_pooler_mode() -> None:
    c = pg_coordinator(transaction_pooler=True)
    engine = c.engine
    assert sa.event.contains(engine, "checkout", poolers.no_prepare)
    driver = types.SimpleNamespace(prepare_threshold=5)  # psycopg's attribute, no server needed
    poolers.no_prepare(types.SimpleNamespace(driver_connection=driver))
    assert driver.prepare_threshold is None
    poolers.no_prepared_statements(engine)  # again: nothing added
    assert len(engine.pool.dispatch.checkout) == 1


def test_handler_processes_get_prepare_threshold_none_merged_into_connect_args() -> None:
    merged = poolers.child_engine_options({"connect_args": {"connect_timeout": 5}, "pool_size": 1}, PG)
    assert merged == {"connect_args": {"connect_timeout": 5, "prepare_threshold": None}, "pool_size": 1}
    assert poolers.child_engine_options({}, "sqlite:///x.db") == {}
    assert poolers.child_engine_options({}, "postgresql+psycopg2://db/app") == {}  # prepares nothing


def test_a_handler_process_with_nullpool_pickles_and_builds_a_nullpool_engine(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    config = ChildConfig(worker="items", database_url=url, engine_options={"poolclass": NullPool},
                         handler=basic.handle, source=basic.Item, parent_pid=0)  # fmt: skip
    runner = Runner(pickle.loads(pickle.dumps(config)))
    assert isinstance(runner.engine.pool, NullPool)
    runner.engine.dispose()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ('ProgrammingError: (psycopg.errors.InvalidSqlStatementName) prepared statement "_pg3_4" does not exist', True),
        ('(psycopg.errors.DuplicatePreparedStatement) prepared statement "_pg3_0" already exists', True),
        ("OperationalError: server closed the connection unexpectedly", False),
        (psycopg.errors.InvalidSqlStatementName("x"), True),
        (psycopg.errors.DuplicatePreparedStatement("x"), True),
        (psycopg.errors.UniqueViolation("x"), False),
    ],
)
def test_prepared_statement_errors_are_recognised(error: Any, expected: bool) -> None:
    assert poolers.is_prepared_statement_error(error) is expected


def test_the_hint_is_logged_once_per_worker_and_not_in_pooler_mode(caplog: pytest.LogCaptureFixture) -> None:
    error = 'prepared statement "_pg3_4" does not exist'
    hint = poolers.Hint(transaction_pooler=False)
    for _ in range(3):
        hint.check("items", error)
    hint.check("items", "deadlock detected")
    hint.check("other", error)
    poolers.Hint(transaction_pooler=True).check("items", error)
    assert [r.getMessage() for r in caplog.records] == [
        f"dbworker worker items: {poolers.HINT}", f"dbworker worker other: {poolers.HINT}"
    ]


def test_the_pod_options_apply_the_pooler_settings() -> None:
    c = pg_coordinator()
    parsed = options.parse(["run", "a:c"], {"DBWORKER_TRANSACTION_POOLER": "true", "DBWORKER_LISTEN_URL": DIRECT})
    app.apply_pooler(c, parsed)
    assert c.transaction_pooler and c.listen_url == "postgresql+psycopg://app:***@db:5432/app"
    migrate = options.parse(["migrate", "a:c"], {"DBWORKER_LISTEN_URL": DIRECT})  # run's only
    assert "listen_url" not in migrate.values and migrate["transaction_pooler"] is None


def test_a_bad_listen_url_from_the_pod_names_the_variable_not_the_url() -> None:
    parsed = options.parse(["run", "a:c"], {"DBWORKER_LISTEN_URL": "postgresql+psycopg2://app:l1sten@db/app"})
    with pytest.raises(termination.CommandError, match="DBWORKER_LISTEN_URL: listen_url must be") as info:
        app.apply_pooler(pg_coordinator(), parsed)
    assert "l1sten" not in str(info.value)
