"""Due times on the application's rows: ``transactional_worker(due=Source.column)``.

A row is claimable only once its ``due`` column is not null and not later than the
database's clock; ``Due`` adds that condition to the worker's eligible query. The loop's
due-time lookup (``attempts.source_due``) reads the soonest future times through the
application's index on the column, so the loop wakes for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapper

from dbworker.contract import Eligible
from dbworker.sql import dialects, statements


@dataclass(frozen=True)
class Due:
    """A worker's due column and its eligible query; calling it gives the query the claim
    path runs (the application's, narrowed to rows that are due).
    """

    column: sa.Column[Any]
    key: sa.Column[Any]
    eligible: Eligible | None  # the application's own query (None: every source row)

    def __call__(self) -> sa.Select[Any]:
        return self.base().where(self.column <= dialects.server_now())

    def base(self) -> sa.Select[Any]:
        """The application's eligible query, without the due condition."""
        return statements.eligible_query(self.eligible, self.key)


def column_of(mapper: Mapper[Any], due: object) -> sa.Column[Any]:
    """The source's column named by ``due`` (an attribute such as ``Post.publish_at``, a
    ``Column`` or a column name); ``ValueError`` naming the fix otherwise.
    """
    source = mapper.class_.__name__
    table = mapper.local_table
    column: Any = None
    if isinstance(due, str):
        column = table.c.get(due) if isinstance(table, sa.Table) else None
    else:
        expression = getattr(due, "expression", due)  # an ORM attribute's column
        if isinstance(expression, sa.Column):
            column = expression
    if not isinstance(column, sa.Column) or column.table is not table:
        raise ValueError(
            f"due must be a column of the source {source}, e.g. due={source}.publish_at "
            f"(a nullable naive-UTC DateTime), got {due!r}"
        )
    if not isinstance(column.type, sa.DateTime):
        raise ValueError(
            f"due={source}.{column.name} must be a DateTime column (naive UTC), it is {column.type}"
        )
    return column
