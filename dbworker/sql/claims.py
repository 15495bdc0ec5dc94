"""Claim rounds: which candidates a claim takes, and the reads around them (the lowest
claimable key, the top key, items claimable again, expired claims).

It binds values to ``statements``' prebuilt statements (which name the locks they take),
selects the candidates and has ``items`` take each one (the writes are ``items``'), in one
committed transaction. Which rows are claimable, and how a server takes them, is
``statements``' and ``dialects``' to answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.limits import Limit
from dbworker.sql import dialects, items, limited, statements, transactions
from dbworker.sql.items import Claim
from dbworker.sql.states import UNFINISHED, WORKING

__all__ = ["Claim", "Round", "claim", "expired", "first_claimable", "named_claimable", "ready_unfinished", "take", "top_key"]


@dataclass(frozen=True)
class Round:
    """One claim round trip: what was taken, how many candidates were seen, the last key seen."""

    taken: list[Claim]
    seen: int
    last_key: Any
    swept: bool  # the query walked key order from a cursor (the eligible query has no order)
    # The next round starts at last_key itself, not after it: an ordered eligible query's
    # lowest claimable key, which this round may have left for later.
    inclusive: bool = False


# --- claiming ----------------------------------------------------------------------------


def claim(
    conn: Connection,
    *,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    limit: int,
    lease_seconds: float,
    after: Any = None,
    keys: Sequence[Any] | None = None,
    inclusive: bool = False,
    limits: Sequence[Limit] = (),
    traced: bool = False,
) -> Round:
    """Claim up to ``limit`` items in one transaction, which this function commits.

    When the eligible query has no order of its own, candidates are taken in key order
    after the cursor ``after`` (None: from the start), so finished history below the cursor
    is never walked again; the caller moves the cursor and wraps it. With ``keys`` only
    those rows are candidates, wherever the cursor stands, and the cursor is left alone:
    on PostgreSQL the keys' text form (what notifications carry, see ``notify.key_text``),
    elsewhere their values.

    Locks: on PostgreSQL, MySQL 8.0.1+ and MariaDB 10.6+ the candidate source rows are
    locked FOR UPDATE SKIP LOCKED until the commit; the work rows written are row-locked
    as any INSERT/UPDATE. Elsewhere (SQLite) the conditional writes alone decide.

    With ``limits`` every round looks at the claimable rows from the worker's mark, in turns
    between keys (no cursor; ``keys`` are looked at too, wherever the mark is;
    ``sql.limited``, ``sql.turns``) and takes the limits' slots.

    ``traced`` (the coordinator traces, the source's trace table exists): a round in one
    statement also reads each claim's attempt count and writer's traceparent (``Claim.attempt``,
    ``Claim.parent``); the other paths leave that read to ``engine.spans``.
    """
    caps = dialects.of(conn)
    lease = caps.seconds_value(lease_seconds)
    if limits:
        taken, seen = limited.claim(conn, table=table, key=key, eligible=eligible, limits=limits, limit=limit,
                                    lease=lease, keys=keys)  # fmt: skip
        return Round(taken, seen, None, swept=False)
    st = statements.prebuilt(table, key, caps)
    if traced:
        one_shot = st.one_shot_keys_traced if keys is not None else st.one_shot_traced if after is None else st.one_shot_after_traced
    else:
        one_shot = st.one_shot_keys if keys is not None else st.one_shot if after is None else st.one_shot_after
    if eligible is None and one_shot is not None and not conn.in_transaction():
        return _claim_in_one_statement(conn, one_shot, limit=limit, lease=lease, after=after, keys=keys, traced=traced)
    if keys is not None:
        return _claim_named(conn, st, caps, key, eligible, keys, limit=limit, lease=lease)
    return _claim_next(conn, st, caps, key, eligible, limit=limit, lease=lease, after=after, inclusive=inclusive)


def _claim_in_one_statement(
    conn: Connection,
    one_shot: statements.Precompiled,
    *,
    limit: int,
    lease: Any,
    after: Any,
    keys: Sequence[Any] | None,
    traced: bool,
) -> Round:
    """PostgreSQL 13+, every row of the source: the whole round is one autocommitted statement
    (``traced``: ``one_shot`` is a traced variant, its claims carry what it read)."""
    params: dict[str, Any] = {"dbw_limit": limit}
    if keys is not None:
        params["dbw_keys"] = list(keys)
    elif after is not None:
        params["dbw_after"] = after
    params["dbw_lease"] = lease
    rows = items.claim_in_one_statement(conn, one_shot, params)
    if traced:  # each row also has the claim's attempt count and the writer's traceparent
        got = [
            Claim(source_id, token, taken_over=previous == WORKING, attempt=attempt, parent=parent)
            for source_id, token, previous, attempt, parent in rows
            if token is not None
        ]
    else:
        got = [
            Claim(source_id, token, taken_over=previous == WORKING)
            for source_id, token, previous in rows
            if token is not None
        ]
    return Round(got, len(rows), rows[-1][0] if rows else None, keys is None)


def _claim_named(
    conn: Connection,
    st: statements.Prebuilt,
    caps: dialects.Capabilities,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    keys: Sequence[Any],
    *,
    limit: int,
    lease: Any,
) -> Round:
    """The rows named by ``keys`` that the eligible query returns; no cursor is involved."""
    query = statements.named_candidates(st, key, statements.eligible_query(eligible, key), caps, keys)
    return _take_candidates(conn, st, query, _named_params(caps, keys, limit), lease, swept=False)


def _named_params(caps: dialects.Capabilities, keys: Sequence[Any], limit: int) -> dict[str, Any]:
    """The parameters of ``statements.named_candidates``: the keys bound as one array where the
    server takes them as text; elsewhere they are in the statement's IN list."""
    return {"dbw_limit": limit, "dbw_keys": list(keys)} if caps.keys_as_text else {"dbw_limit": limit}


def _claim_next(
    conn: Connection,
    st: statements.Prebuilt,
    caps: dialects.Capabilities,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    *,
    limit: int,
    lease: Any,
    after: Any,
    inclusive: bool = False,
) -> Round:
    """The sweep's next rows in key order after ``after``, or an ordered eligible query's first rows."""
    if eligible is None:  # prebuilt: every row of the source, in key order
        swept = True
        query = st.every if after is None else st.every_after
    else:
        base = statements.eligible_query(eligible, key)
        if statements.is_ordered(base):
            return _claim_ordered(conn, st, caps, key, base, limit=limit, lease=lease, after=after, inclusive=inclusive)
        swept = True
        query = statements.eligible_candidates(st, key, base, caps, cursor=after is not None)
    params: dict[str, Any] = {"dbw_limit": limit}
    if swept and after is not None:
        params["dbw_after"] = after
    return _take_candidates(conn, st, query, params, lease, swept=swept)


def _claim_ordered(
    conn: Connection,
    st: statements.Prebuilt,
    caps: dialects.Capabilities,
    key: sa.Column[Any],
    query: sa.Select[Any],
    *,
    limit: int,
    lease: Any,
    after: Any,
    inclusive: bool,
) -> Round:
    """An ordered eligible query's first rows in its order, among keys from its lowest claimable one.

    First the lowest claimable key in key order from the cursor (``after``; None: from the
    first row), then the query in its own order from that key: finished history below it
    is neither walked nor handed to the application's filters again. The cursor moves
    to that key (inclusive: it may be left for later) or, when nothing is claimable, to the
    top (``last_key`` None).
    """
    low = _lowest_claimable(conn, st, caps, key, query, after=after, inclusive=inclusive)
    if low is None:  # looked without locks: nothing is claimable, none was only skipped
        return Round([], 0, None, swept=True, inclusive=True)
    candidates = statements.eligible_candidates(st, key, query, caps, cursor=False, low=True)
    rnd = _take_candidates(conn, st, candidates, {"dbw_limit": limit, "dbw_low": low}, lease, swept=True)
    return Round(rnd.taken, rnd.seen, low, swept=True, inclusive=True)


def _take_candidates(
    conn: Connection,
    st: statements.Prebuilt,
    query: sa.Select[Any],
    params: dict[str, Any],
    lease: Any,
    *,
    swept: bool,
) -> Round:
    """Select the candidates and take each one this process can win, in one committed transaction."""
    taken: list[Claim] = []
    with transactions.committed(conn):
        if st.relax is not None:
            conn.execute(st.relax)
        candidates = conn.execute(query, params).scalars().all()
        rest = list(candidates)
        if st.first_many is not None and len(candidates) > 1:
            first = items.claim_first_many(conn, st, candidates, lease)
            taken += first
            won = {c.source_id for c in first}
            rest = [i for i in candidates if i not in won]
        taken += items.claim_each(conn, st, rest, lease)
    order = {source_id: n for n, source_id in enumerate(candidates)}
    taken.sort(key=lambda c: order[c.source_id])  # hand items out in the query's order
    return Round(taken, len(candidates), candidates[-1] if candidates else None, swept)


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
    return items.claim(conn, statements.of(conn, table), source_id, caps.seconds_value(lease_seconds))


def top_key(conn: Connection, key: sa.Column[Any]) -> Any:
    """The source's highest key now (None: it has no rows), in a transaction of its own."""
    with conn.begin():
        return conn.execute(statements.top_key(key)).scalar()


def first_claimable(
    conn: Connection,
    *,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    after: Any,
) -> Any:
    """The lowest claimable key after ``after`` (None: from the first row), read without
    locks, in a transaction of its own: whether a round that took nothing skipped a row
    another transaction held (SKIP LOCKED) rather than finding none.
    """
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    query = statements.eligible_query(eligible, key)
    return _lowest_claimable(conn, st, caps, key, query, after=after, inclusive=False)


def named_claimable(
    conn: Connection,
    *,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    keys: Sequence[Any],
) -> list[Any]:
    """The keys among ``keys`` (as ``claim`` takes them) claimable now, read without locks in
    a transaction of its own: which rows a round by key skipped because another transaction
    held them (SKIP LOCKED) rather than found not claimable."""
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    query = statements.named_candidates(st, key, statements.eligible_query(eligible, key), caps, keys, locked=False)
    with transactions.committed(conn):
        return list(conn.execute(query, _named_params(caps, keys, len(keys))).scalars())


def _lowest_claimable(
    conn: Connection,
    st: statements.Prebuilt,
    caps: dialects.Capabilities,
    key: sa.Column[Any],
    query: sa.Select[Any],
    *,
    after: Any,
    inclusive: bool,
) -> Any:
    """The lowest key of ``query`` claimable now, from ``after`` (None: from the first row;
    ``inclusive``: ``after`` itself counts), read without locks in a committed transaction."""
    finder = statements.first_candidate(st, key, query, caps, bound=None if after is None else inclusive)
    with transactions.committed(conn):
        return conn.execute(finder, {} if after is None else {"dbw_after": after}).scalar()


def ready_unfinished(conn: Connection, table: sa.Table, limit: int) -> list[Any]:
    """Up to ``limit`` unfinished items claimable now (given back, reset, done waiting), in a
    transaction of its own. Read through the ``execution_status`` index: unfinished items
    are few, whatever the finished history.
    """
    w = table.c
    caps = dialects.of(conn)
    query = (
        sa.select(w.source_id)
        .where(w.execution_status == UNFINISHED, sa.or_(w.not_before.is_(None), w.not_before <= caps.now()))
        .limit(limit)
    )
    with conn.begin():
        return list(conn.execute(query).scalars())


def expired(conn: Connection, table: sa.Table, limit: int) -> list[Any]:
    """Up to ``limit`` items whose claim expired (their process died), in a transaction of its own.

    Read through the lease index: the cost is the same whatever the finished history, which
    has no lease. The sweep finds these items too, but only at its spaced-out wraps when
    they lie behind its cursor.
    """
    with conn.begin():
        return list(conn.execute(statements.of(conn, table).expired, {"dbw_limit": limit}).scalars())
