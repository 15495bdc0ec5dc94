"""Every claim-path statement: find claimable rows, take them, renew, complete, release.

A row is claimable when the worker's ``eligible`` query returns it and its work record is
absent, ``unfinished``, or ``working`` with an expired lease. Taking is decided by a
conditional INSERT/UPDATE on the work table (its primary key settles two first claims of one
item); on servers with SKIP LOCKED the candidate source rows are also locked while they are
taken, so concurrent claimers pass over each other instead of colliding. Leases are
computed on the server's clock. Completion is fenced by the claim token.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker import dialects, tables
from dbworker.contract import ExecutionStatus

WORKING = ExecutionStatus.WORKING.value
UNFINISHED = ExecutionStatus.UNFINISHED.value
DONE = (ExecutionStatus.FINISHED.value, ExecutionStatus.FAILED.value)


@dataclass(frozen=True)
class Claim:
    """One taken item: its source key, the claim's token, and whether it took over a dead claim."""

    source_id: Any
    token: str
    taken_over: bool = False


def blocked(
    table: sa.Table, key: sa.ColumnElement[Any], caps: dialects.Capabilities, *, after: Any = None
) -> sa.ColumnElement[bool]:
    """EXISTS a work record that keeps ``key``'s row from being claimed now.

    Correlated on the work table's primary key, so its cost per candidate row is one index
    probe. ``after`` repeats a sweep cursor inside, so a planner that turns this into a merge
    anti-join starts the work table's index at the cursor too, not at its first finished row.
    """
    w = table.c
    cursor = [w.source_id > after] if after is not None else []
    return (
        sa.select(sa.literal(1))
        .where(
            w.source_id == key,
            *cursor,
            sa.or_(
                w.execution_status.in_(DONE),
                sa.and_(w.execution_status == WORKING, w.lease_expires_at > caps.now()),
            ),
        )
        .exists()
    )


def eligible_query(eligible: Callable[[], sa.Select[Any]] | None, key: sa.Column[Any]) -> sa.Select[Any]:
    """The application's eligible query (called afresh), or every row of the source."""
    query = sa.select(key.table) if eligible is None else eligible()
    if not isinstance(query, sa.Select):
        raise TypeError(f"eligible() must return a select() over the source, got {type(query).__name__}")
    return query


def claimable(
    table: sa.Table,
    key: sa.Column[Any],
    query: sa.Select[Any],
    caps: dialects.Capabilities,
    *,
    after: Any = None,
) -> sa.Select[Any]:
    """``query`` (the eligible one) narrowed to claimable rows, selecting only the source key.

    The application's filters, joins and ordering are kept, so the first claimable row in
    its order comes first. ``after`` keeps only keys above a sweep cursor.
    """
    query = query.with_only_columns(key, maintain_column_froms=True)
    if after is not None:
        query = query.where(key > after)
    return query.where(~blocked(table, key, caps, after=after))


def is_ordered(query: sa.Select[Any]) -> bool:
    """Whether the application's query fixes an order of its own."""
    return bool(getattr(query, "_order_by_clauses", ()))


@dataclass(frozen=True)
class Round:
    """One claim round trip: what was taken, how many candidates were seen, the last key seen."""

    taken: list[Claim]
    seen: int
    last_key: Any
    swept: bool  # the query walked key order from a cursor (the eligible query has no order)


def claim(
    conn: Connection,
    *,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    limit: int,
    lease_seconds: float,
    after: Any = None,
) -> Round:
    """Claim up to ``limit`` items in one transaction, which this function commits.

    When the eligible query has no order of its own, candidates are taken in key order
    after the cursor ``after`` (None: from the start), so finished history below the cursor
    is never walked again; the caller moves the cursor and wraps it.

    Locks: on PostgreSQL, MySQL 8.0.1+ and MariaDB 10.6+ the candidate source rows are
    locked FOR UPDATE SKIP LOCKED until the commit; the work rows written are row-locked
    as any INSERT/UPDATE. Elsewhere (SQLite) the conditional writes alone decide.
    """
    caps = dialects.of(conn)
    base = eligible_query(eligible, key)
    swept = not is_ordered(base)
    query = claimable(table, key, base, caps, after=after if swept else None)
    if swept:
        query = query.order_by(key)
    query = query.limit(limit)
    if caps.skip_locked:
        query = query.with_for_update(skip_locked=True, of=key.table if caps.lock_of else None)
    taken: list[Claim] = []
    try:
        dialects.relax_durability(conn)
        candidates = conn.execute(query).scalars().all()
        rest = list(candidates)
        if caps.name == "postgresql" and len(candidates) > 1:
            first = take_first_claims(conn, table, candidates, caps=caps, lease_seconds=lease_seconds)
            taken += first
            won = {c.source_id for c in first}
            rest = [i for i in candidates if i not in won]
        for source_id in rest:
            result = take(conn, table, source_id, caps=caps, lease_seconds=lease_seconds)
            if result is not None:
                taken.append(result)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    order = {source_id: n for n, source_id in enumerate(candidates)}
    taken.sort(key=lambda c: order[c.source_id])  # hand items out in the query's order
    return Round(taken, len(candidates), candidates[-1] if candidates else None, swept)


def take_first_claims(
    conn: Connection,
    table: sa.Table,
    source_ids: Sequence[Any],
    *,
    caps: dialects.Capabilities,
    lease_seconds: float,
) -> list[Claim]:
    """First claims of many items in one statement (PostgreSQL): the ones whose insert won.

    Items that already have a work record are left to ``take``.
    """
    tokens = {source_id: str(uuid.uuid4()) for source_id in source_ids}
    lease = caps.now_plus(lease_seconds)
    rows = [
        {"source_id": source_id, "execution_status": WORKING, "claim_token": token,
         "lease_expires_at": lease, "error": None}
        for source_id, token in tokens.items()
    ]
    # The PostgreSQL form returns the keys it inserted (ON CONFLICT DO NOTHING ... RETURNING).
    won = conn.execute(caps.insert_ignoring_duplicate(table, "source_id").values(rows)).scalars().all()
    return [Claim(source_id, tokens[source_id]) for source_id in won]


def take(
    conn: Connection,
    table: sa.Table,
    source_id: Any,
    *,
    caps: dialects.Capabilities,
    lease_seconds: float,
) -> Claim | None:
    """Take one candidate: first claim, claim of an unfinished item, or take-over of an expired one.

    Each is a conditional write whose row count says whether this process won the item.
    """
    w = table.c
    token = str(uuid.uuid4())
    values = {
        "execution_status": WORKING,
        "claim_token": token,
        "lease_expires_at": caps.now_plus(lease_seconds),
        "error": None,
    }
    first = caps.insert_ignoring_duplicate(table, "source_id").values(source_id=source_id, **values)
    if dialects.inserted(conn.execute(first)):
        return Claim(source_id, token)
    again = sa.update(table).where(w.source_id == source_id, w.execution_status == UNFINISHED).values(**values)
    if conn.execute(again).rowcount == 1:
        return Claim(source_id, token)
    expired = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    over = sa.update(table).where(w.source_id == source_id, w.execution_status == WORKING, expired).values(**values)
    if conn.execute(over).rowcount == 1:
        return Claim(source_id, token, taken_over=True)
    return None


def renew(conn: Connection, table: sa.Table, claims: Sequence[Claim], *, lease_seconds: float) -> list[Claim]:
    """Extend the leases of ``claims`` still held; commit; return the claims found lost."""
    caps = dialects.of(conn)
    w = table.c
    lost: list[Claim] = []
    try:
        dialects.relax_durability(conn)
        for c in claims:
            stmt = (
                sa.update(table)
                .where(w.source_id == c.source_id, w.claim_token == c.token, w.execution_status == WORKING)
                .values(lease_expires_at=caps.now_plus(lease_seconds))
            )
            if conn.execute(stmt).rowcount != 1:
                lost.append(c)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return lost


def complete(
    conn: Connection,
    table: sa.Table,
    claim: Claim,
    status: ExecutionStatus,
    *,
    error: str | None = None,
) -> bool:
    """Record ``status`` for ``claim`` if its token is still current (the fence); no commit.

    The caller commits: in a handler process this write shares the handler's transaction,
    so the handler's writes and the outcome commit together or not at all.
    """
    w = table.c
    if error is not None and len(error) > tables.ERROR_MAX_CHARS:
        error = error[: tables.ERROR_MAX_CHARS - 20] + "\n... (truncated)"
    stmt = (
        sa.update(table)
        .where(w.source_id == claim.source_id, w.claim_token == claim.token, w.execution_status == WORKING)
        .values(execution_status=status.value, claim_token=None, lease_expires_at=None, error=error)
    )
    return bool(conn.execute(stmt).rowcount == 1)


def release(conn: Connection, table: sa.Table, claim: Claim) -> bool:
    """Give ``claim`` back at once (``unfinished``, no lease) so any process may take it; commits."""
    try:
        dialects.relax_durability(conn)
        released = complete(conn, table, claim, ExecutionStatus.UNFINISHED)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return released


def fail(conn: Connection, table: sa.Table, claim: Claim, error: str) -> bool:
    """Record ``claim`` as failed with ``error`` if it is still current; commits."""
    try:
        failed = complete(conn, table, claim, ExecutionStatus.FAILED, error=error)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return failed
