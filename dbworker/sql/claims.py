"""Running the claim path: claim, renew, complete, release, fail, and the expired-lease lookup.

It binds values to ``statements``' prebuilt statements (which name the locks they take),
runs them, commits where it says so and turns rows into ``Claim`` records. Which rows are
claimable, and how a server takes them, is ``statements``' and ``dialects``' to answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, statements, tables, transactions


@dataclass(frozen=True)
class Claim:
    """One taken item: its source key, the claim's token, and whether it took over a dead claim."""

    source_id: Any
    token: str
    taken_over: bool = False


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
    """
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    lease = caps.seconds_value(lease_seconds)
    one_shot = st.one_shot_keys if keys is not None else st.one_shot if after is None else st.one_shot_after
    if eligible is None and one_shot is not None and not conn.in_transaction():
        return _claim_in_one_statement(conn, one_shot, limit=limit, lease=lease, after=after, keys=keys)
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
) -> Round:
    """PostgreSQL 13+, every row of the source: the whole round is one autocommitted statement."""
    params: dict[str, Any] = {"dbw_limit": limit}
    if keys is not None:
        params["dbw_keys"] = list(keys)
    elif after is not None:
        params["dbw_after"] = after
    params["dbw_lease"] = lease
    rows: Sequence[Any] = one_shot.execute(conn.execution_options(isolation_level="AUTOCOMMIT"), params).all()
    # Nothing to send in autocommit, but SQLAlchemy began a transaction of its own: ended,
    # so a next round on this connection is one statement too (and not a slower path
    # whose row locks would not outlive each statement).
    conn.commit()
    got = [
        Claim(source_id, token, taken_over=previous == statements.WORKING)
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
    params: dict[str, Any] = {"dbw_limit": limit}
    if caps.name == "postgresql":
        params["dbw_keys"] = list(keys)
    return _take_candidates(conn, st, query, params, lease, swept=False)


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
            first = take_first_claims(conn, st, candidates, lease)
            taken += first
            won = {c.source_id for c in first}
            rest = [i for i in candidates if i not in won]
        for source_id in rest:
            result = _take(conn, st, source_id, lease)
            if result is not None:
                taken.append(result)
    order = {source_id: n for n, source_id in enumerate(candidates)}
    taken.sort(key=lambda c: order[c.source_id])  # hand items out in the query's order
    return Round(taken, len(candidates), candidates[-1] if candidates else None, swept)


def take_first_claims(conn: Connection, st: statements.Prebuilt, source_ids: Sequence[Any], lease: Any) -> list[Claim]:
    """First claims of many items in one statement (PostgreSQL): the ones whose insert won.

    Items that already have a work record are left to ``take``.
    """
    tokens = {source_id: str(uuid.uuid4()) for source_id in source_ids}
    params = {"dbw_sids": list(tokens), "dbw_tokens": list(tokens.values()), "dbw_lease": lease}
    won = conn.execute(st.first_many, params).scalars().all()
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
    return _take(conn, statements.of(conn, table), source_id, caps.seconds_value(lease_seconds))


def _take(conn: Connection, st: statements.Prebuilt, source_id: Any, lease: Any) -> Claim | None:
    token = str(uuid.uuid4())
    params = {"dbw_sid": source_id, "dbw_token": token, "dbw_lease": lease}
    if dialects.inserted(conn.execute(st.first, params)):
        return Claim(source_id, token)
    if conn.execute(st.again, params).rowcount == 1:
        return Claim(source_id, token)
    if conn.execute(st.over, params).rowcount == 1:
        return Claim(source_id, token, taken_over=True)
    return None


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
        .where(w.execution_status == statements.UNFINISHED, sa.or_(w.not_before.is_(None), w.not_before <= caps.now()))
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


# --- holding and ending ------------------------------------------------------------------


def renew(conn: Connection, table: sa.Table, claims: Sequence[Claim], *, lease_seconds: float) -> list[Claim]:
    """Extend the leases of ``claims`` still held; commit; return the claims another process holds now.

    A claim whose item just ended (its handler committed while we renewed, before the
    coordinator heard of it) is not lost: its record has no token any more.
    """
    caps = dialects.of(conn)
    st = statements.of(conn, table)
    lease = caps.seconds_value(lease_seconds)
    lost: list[Claim] = []
    with transactions.committed(conn):
        if st.relax is not None:
            conn.execute(st.relax)
        for c in claims:
            params = {"dbw_sid": c.source_id, "dbw_token": c.token, "dbw_lease": lease}
            if conn.execute(st.renew, params).rowcount != 1 and _held_by_another(conn, table, c):
                lost.append(c)
    return lost


def _held_by_another(conn: Connection, table: sa.Table, claim: Claim) -> bool:
    token = conn.execute(statements.holder(table, claim.source_id)).first()
    return token is None or (token[0] is not None and token[0] != claim.token)


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
    if error is not None and len(error) > tables.ERROR_MAX_CHARS:
        error = error[: tables.ERROR_MAX_CHARS - 20] + "\n... (truncated)"
    params = {"dbw_sid": claim.source_id, "dbw_token": claim.token, "dbw_status": status.value, "dbw_error": error}
    return bool(conn.execute(statements.of(conn, table).complete, params).rowcount == 1)


class Completer:
    """A handler's outcome for one work table through ``Precompiled`` (a handler process's hot
    path): ``complete`` for FINISHED, ``step_over`` for UNFINISHED (attempts start again).
    """

    def __init__(self, table: sa.Table) -> None:
        self._table = table
        self._finish: statements.Precompiled | None = None
        self._step_over: statements.Precompiled | None = None

    def __call__(self, conn: Connection, claim: Claim, status: ExecutionStatus) -> bool:
        if self._finish is None or self._step_over is None:
            self.prepare(conn)
        assert self._finish is not None and self._step_over is not None
        values: dict[str, Any] = {"dbw_sid": claim.source_id, "dbw_token": claim.token}
        if status is ExecutionStatus.UNFINISHED:
            return bool(self._step_over.execute(conn, values).rowcount == 1)
        values |= {"dbw_status": status.value, "dbw_error": None}
        return bool(self._finish.execute(conn, values).rowcount == 1)

    def prepare(self, conn: Connection) -> None:
        """Compile for ``conn``'s dialect now (else on first use)."""
        st = statements.of(conn, self._table)
        self._finish, self._step_over = statements.Precompiled(st.complete), statements.Precompiled(st.step_over)
        self._finish.prepare(conn.dialect)
        self._step_over.prepare(conn.dialect)


def release(conn: Connection, table: sa.Table, claim: Claim, *, started: bool = True) -> bool:
    """Give ``claim`` back at once (``unfinished``, no lease) so any process may take it; commits.

    ``started=False``: its handler never ran (prefetched, taken back, or a transient
    database error), so the attempt its claim counted is taken back too.
    """
    with transactions.committed(conn):
        relax = statements.of(conn, table).relax
        if relax is not None:
            conn.execute(relax)
        released = complete(conn, table, claim, ExecutionStatus.UNFINISHED)
        if released and not started:
            w = table.c
            conn.execute(
                sa.update(table)
                .where(w.source_id == claim.source_id, w.claim_token.is_(None), w.attempts > 0)
                .values(attempts=w.attempts - 1)
            )
    return released
