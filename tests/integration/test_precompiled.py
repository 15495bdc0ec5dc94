"""Hot-path statements compiled once (statements.Precompiled): same results as SQLAlchemy's own execution."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from dbworker import Coordinator, ExecutionStatus
from dbworker.sql import statements
from tests import pooler
from tests.apps import typed_keys
from tests.conftest import Database
from tests.helpers import wait_until


def _driver_sql_runs(engine: sa.Engine) -> list[bool]:
    runs: list[bool] = []

    @event.listens_for(engine, "before_cursor_execute")
    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        runs.append(context.compiled is None)  # SQL text from exec_driver_sql, compiled by no one

    return runs


def test_plain_types_run_as_driver_sql_and_processed_types_the_normal_way(db: Database) -> None:
    table = typed_keys.Order.__table__
    typed_keys.Base.metadata.create_all(db.engine)
    with db.engine.begin() as conn:
        conn.execute(sa.insert(table), [{"code": "order-1", "done": False}, {"code": "order-2", "done": True}])
    length = sa.func.length(table.c.code) == sa.bindparam("n", type_=sa.Integer())
    plain = statements.Precompiled(sa.select(sa.func.count()).select_from(table).where(length))
    typed = statements.Precompiled(sa.select(table.c.code).where(table.c.code == sa.bindparam("k", type_=table.c.code.type)))
    runs = _driver_sql_runs(db.engine)
    with db.engine.connect() as conn:
        assert plain.execute(conn, {"n": 7}).scalar_one() == 2
        assert runs == [True]
        # The key is stored upper case: only the type's processing finds and returns it right.
        assert typed.execute(conn, {"k": "order-2"}).all() == [("order-2",)]
        assert runs == [True, False]


def test_a_literal_statement_is_sent_with_its_values_in_its_text(db: Database) -> None:
    """``Precompiled(literal=True)`` (the claim loop's lookup on PostgreSQL): no parameters
    sent, the same rows as SQLAlchemy's own execution."""
    table = typed_keys.Order.__table__
    typed_keys.Base.metadata.create_all(db.engine)
    with db.engine.begin() as conn:
        conn.execute(sa.insert(table), [{"code": "order-1", "done": False}, {"code": "order-22", "done": True}])
    seven = sa.func.length(sa.literal("it's-22", sa.String()))  # a quote, escaped in the text
    query = sa.select(sa.func.count()).select_from(table).where(sa.func.length(table.c.code) == seven)
    sent: list[Any] = []
    event.listen(db.engine, "before_cursor_execute", lambda *a: sent.append((a[2], a[3])))
    with db.engine.connect() as conn:
        assert statements.Precompiled(query, literal=True).execute(conn, {}).scalar_one() == 1
        assert conn.execute(query).scalar_one() == 1
    [(sql, parameters), _] = sent
    assert "'it''s-22'" in sql and not parameters, (sql, parameters)


def test_items_whose_key_needs_its_type_processing_are_claimed_and_run(db: Database) -> None:
    typed_keys.Base.metadata.create_all(db.engine)
    coordinator = Coordinator(db.session_factory, database_url=db.url, poll_seconds=0.05, max_poll_seconds=0.2,
                              **pooler.coordinator_options(db.url))  # fmt: skip
    coordinator.transactional_worker(name="ship", source=typed_keys.Order, concurrency=2)(typed_keys.ship)
    coordinator.create_worker_tables()
    codes = [f"order-{n}" for n in range(12)]
    with Session(db.engine) as session:
        session.add_all(typed_keys.Order(code=code) for code in codes)
        session.commit()
    coordinator.start()
    try:

        def statuses() -> list[ExecutionStatus | None]:
            with Session(db.engine) as session:
                return [coordinator.execution_status(session, worker="ship", source_id=c) for c in codes]

        wait_until(lambda: all(s is not None and s is not ExecutionStatus.WORKING for s in statuses()),
                   what="every order to end")  # fmt: skip
        assert statuses() == [ExecutionStatus.FINISHED] * len(codes)
        with Session(db.engine) as session:
            assert session.scalars(sa.select(typed_keys.Order.done)).all() == [True] * len(codes)
    finally:
        coordinator.stop()

