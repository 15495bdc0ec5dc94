"""The console's audit of actions on sets of items: ``dbworker_actions``, one row per action.

Who acted (a console token's name), on which worker, what (retry, cancel, run-again), on
which filter (its query string) and how many items changed, with the server's time. The
table is dbworker's own (not in the application's MetaData), created when first needed
(``upgrade.ensure``). Nothing here commits.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects

TABLE_NAME = "dbworker_actions"
WHO_LENGTH = 255
FILTER_CHARS = 4_000
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

METADATA = sa.MetaData()
TABLE = sa.Table(
    TABLE_NAME,
    METADATA,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("at", sa.DateTime(), nullable=False),
    sa.Column("who", sa.String(WHO_LENGTH), nullable=False),
    sa.Column("worker", sa.String(64), nullable=False),
    sa.Column("action", sa.String(20), nullable=False),
    sa.Column("filter", sa.Text(), nullable=False),  # the filter's query string ("" : every item)
    sa.Column("count", sa.Integer(), nullable=False),
    sa.Index("ix_dbworker_actions_worker", "worker", "id"),
)


def record(conn: Connection, *, who: str, worker: str, action: str, filter_text: str, count: int) -> None:
    """One audit line; no commit."""
    conn.execute(sa.insert(TABLE).values(
        at=dialects.of(conn).now(), who=who[:WHO_LENGTH], worker=worker, action=action,
        filter=filter_text[:FILTER_CHARS], count=count,
    ))  # fmt: skip


def recent(conn: Connection, worker: str, *, limit: int = 20) -> list[dict[str, Any]]:
    """The newest ``limit`` lines of ``worker``, newest first (through the (worker, id) index)."""
    t = TABLE.c
    query = sa.select(t.at, t.who, t.action, t.filter, t.count).where(t.worker == worker).order_by(t.id.desc())
    return [dict(r) for r in conn.execute(query.limit(limit)).mappings()]
