"""Writes under a claim's token (the fence): renew leases, record an outcome, step over.

Each changes the work record of ``dbw_sid`` only while the claim ``dbw_token`` still holds
it (``predicates.fenced``), so a claim another process took over, or one that was cancelled,
writes nothing; the row count says whether it did. ``holders`` reads who holds them instead.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dbworker.sql import dialects
from dbworker.sql.predicates import UNFINISHED, WORKING, fenced


def renew_many(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Extend by ``dbw_lease`` the leases of the records of ``dbw_sids`` still held by one of
    the claims ``dbw_tokens`` (expanding parameters): one statement for many claims, each
    record changed only under its own claim's token (tokens are unique per claim), so the row
    count is the number of claims still held.

    Locks: each matched work row by its primary key until the commit (on MySQL/MariaDB at
    READ COMMITTED, released at once when a row does not match). SQLite: the write lock.
    """
    w = table.c
    return dialects.update_by_key(table).where(
        w.source_id.in_(sa.bindparam("dbw_sids", expanding=True)),
        w.claim_token.in_(sa.bindparam("dbw_tokens", expanding=True)),
        w.execution_status == WORKING,
    ).values(lease_expires_at=caps.now_plus_param("dbw_lease"))


def complete(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Record ``dbw_status`` and ``dbw_error`` for ``dbw_sid`` if the claim ``dbw_token`` still holds it (the fence).

    Ends the claim (no token, no lease) and stamps ``ended_at`` and ``changed_at`` unless the status is
    UNFINISHED (a claim given back). Locks: the work row until the caller's commit, which in
    a handler process is the handler's own transaction. SQLite: the write lock.
    """
    w = table.c
    status = sa.bindparam("dbw_status", type_=w.execution_status.type)
    return dialects.update_by_key(table).where(fenced(table)).values(
        ended_at=sa.case((status == UNFINISHED, w.ended_at), else_=caps.now()),
        changed_at=sa.case((status == UNFINISHED, w.changed_at), else_=caps.now()),
        execution_status=status,
        claim_token=None,
        lease_expires_at=None,
        error=sa.bindparam("dbw_error", type_=w.error.type),
        traceback=None,
        not_before=None,
    )


def step_over(table: sa.Table) -> sa.Update:
    """The handler returned ``Unfinished()``: record UNFINISHED for ``dbw_sid`` if the claim
    ``dbw_token`` still holds it (the fence), and start the next step's attempts at 0.

    Locks: as ``complete``.
    """
    return dialects.update_by_key(table).where(fenced(table)).values(
        execution_status=UNFINISHED,
        claim_token=None,
        lease_expires_at=None,
        error=None,
        traceback=None,
        not_before=None,
        attempts=0,
    )


def holders(table: sa.Table) -> sa.Select[Any]:
    """The source key and claim token of each record of ``dbw_sids`` (expanding). Locks: none."""
    return sa.select(table.c.source_id, table.c.claim_token).where(
        table.c.source_id.in_(sa.bindparam("dbw_sids", expanding=True))
    )
