"""The application's Coordinator: database from env `DATABASE_URL`, the two workers registered.

Both services import this module: the API (which only reads statuses and never starts it)
and `dbworker run examples.imagededup.app:coordinator` (which runs the handlers). The
handlers live in `workers`; what makes a duplicate query claimable lives here, beside them.
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, ExecutionStatus, Retry
from examples.imagededup import models, workers

DEFAULT_DATABASE_URL = "sqlite:///imagededup.sqlite"
DATABASE_URL = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL

# A hash that failed settles a query's wait as much as one that finished: the compare
# handler then runs and fails the query with the reason instead of waiting forever.
SETTLED = (ExecutionStatus.FINISHED, ExecutionStatus.FAILED)


def engine_options(url: str) -> dict[str, Any]:
    """Engine options for this process and the handler processes dbworker spawns."""
    if sa.make_url(url).get_backend_name() == "sqlite":
        # The API and the handler processes write the same file: wait for its lock.
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True}


engine = sa.create_engine(DATABASE_URL, **engine_options(DATABASE_URL))
Session = sessionmaker(engine)
coordinator = Coordinator(
    Session, database_url=DATABASE_URL, engine_options=engine_options(DATABASE_URL)
)


def compare_eligible() -> sa.Select[Any]:
    """Queries whose own image's hash and every hash of their next page have settled."""
    query = models.DuplicateQuery
    candidate = sa.orm.aliased(models.Image)
    unsettled_in_next_page = (
        sa.select(candidate.id)
        .where(
            candidate.id > query.cursor,
            candidate.id <= query.cursor + query.page_size,
            candidate.id <= query.upper_id,
            candidate.id != query.image_id,
            ~coordinator.has_execution_status(
                worker="hash", source_id=candidate.id, statuses=SETTLED
            ),
        )
        .exists()
    )
    return (
        sa.select(query)
        .where(
            coordinator.has_execution_status(
                worker="hash", source_id=query.image_id, statuses=SETTLED
            ),
            ~unsettled_in_next_page,
        )
        .order_by(query.id)
    )


coordinator.transactional_worker(name="hash", source=models.Image, concurrency=2)(
    workers.hash_image
)
coordinator.transactional_worker(
    name="compare", source=models.DuplicateQuery, eligible=compare_eligible, concurrency=2
)(workers.compare_page)


def digest_eligible() -> sa.Select[Any]:
    """Queries whose compare finished: the async digest worker reads them back from the API."""
    query = models.DuplicateQuery
    finished = coordinator.has_execution_status(worker="compare", source_id=query.id, statuses=(ExecutionStatus.FINISHED,))
    return sa.select(query).where(finished).order_by(query.id)


# An async handler: up to 50 API calls in flight as coroutines of one handler process.
coordinator.transactional_worker(
    name="digest", source=models.DuplicateQuery, eligible=digest_eligible, concurrency=50,
    retry=Retry(max_attempts=3, delay=1), timeout=30,
)(workers.digest_query)


def create_schema() -> None:
    """Create the example's tables and dbworker's work tables; safe to run again."""
    models.Base.metadata.create_all(engine)
    coordinator.upgrade_worker_tables()
    if engine.dialect.name == "sqlite":
        # WAL lets the API read while a handler process writes; the mode sticks to the file.
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
