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
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, tables

WORKING = ExecutionStatus.WORKING.value
UNFINISHED = ExecutionStatus.UNFINISHED.value
DONE = (ExecutionStatus.FINISHED.value, ExecutionStatus.FAILED.value)


@dataclass(frozen=True)
class Claim:
    """One taken item: its source key, the claim's token, and whether it took over a dead claim."""

    source_id: Any
    token: str
    taken_over: bool = False


@dataclass(frozen=True)
class _Statements:
    """The claim path's statements for one work table on one kind of server, built once.

    They take bound parameters (``dbw_*``), so the hot path only binds values: building
    SQLAlchemy expressions anew for every claim cost more CPU than the database did.
    """

    table: sa.Table
    blocked: sa.ColumnElement[bool]
    blocked_after: sa.ColumnElement[bool]
    relax: sa.Select[Any] | None
    every: sa.Select[Any]  # eligible=None: every claimable row in key order, from the start
    every_after: sa.Select[Any]  # ... and from a cursor
    first: Any
    first_many: Any  # PostgreSQL: first claims of many items in one statement; else None
    one_shot: Precompiled | None  # PostgreSQL 13+, eligible=None: the whole claim as one statement
    one_shot_after: Precompiled | None
    one_shot_keys: Precompiled | None  # ... of the rows named in ``dbw_keys`` (their keys as text)
    again: sa.Update
    over: sa.Update
    expired: sa.Select[Any]  # keys of WORKING items whose lease expired, through the lease index
    renew: sa.Update
    complete: sa.Update


_STATEMENTS: dict[tuple[int, int, dialects.Capabilities], _Statements] = {}


def _blocked(table: sa.Table, key: sa.ColumnElement[Any], caps: dialects.Capabilities, cursor: bool) -> sa.ColumnElement[bool]:
    """EXISTS a work record that keeps ``key``'s row from being claimed now.

    Correlated on the work table's primary key, so its cost per candidate row is one index
    probe. With ``cursor`` the sweep's cursor (bound as ``dbw_after``) is repeated inside, so
    a planner that turns this into a merge anti-join starts the work table's index at the
    cursor too, not at its first finished row.
    """
    w = table.c
    after = [w.source_id > sa.bindparam("dbw_after", type_=w.source_id.type)] if cursor else []
    return (
        sa.select(sa.literal(1))
        .where(
            w.source_id == key,
            *after,
            sa.or_(
                # Not in_(): an expanding IN is re-rendered at every execution.
                *(w.execution_status == done for done in DONE),
                sa.and_(w.execution_status == WORKING, w.lease_expires_at > caps.now()),
            ),
        )
        .exists()
    )


def statements(table: sa.Table, key: sa.Column[Any], caps: dialects.Capabilities) -> _Statements:
    """The prebuilt claim-path statements of ``table`` (see ``_Statements``)."""
    cache_key = (id(table), id(key), caps)
    found = _STATEMENTS.get(cache_key)
    if found is not None and found.table is table:
        return found
    w = table.c
    sid = sa.bindparam("dbw_sid", type_=w.source_id.type)
    token = sa.bindparam("dbw_token", type_=w.claim_token.type)
    taking = {
        "execution_status": WORKING,
        "claim_token": token,
        "lease_expires_at": caps.now_plus_param("dbw_lease"),
        "error": None,
    }
    held = sa.and_(w.source_id == sid, w.claim_token == token, w.execution_status == WORKING)
    expired = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    blocked_plain = _blocked(table, key, caps, cursor=False)
    blocked_after = _blocked(table, key, caps, cursor=True)
    built = _Statements(
        table=table,
        blocked=blocked_plain,
        blocked_after=blocked_after,
        relax=dialects.relax_statement(caps),
        every=_lock(caps, key, _order_limit(_narrow_with(blocked_plain, blocked_after, key, sa.select(key.table), swept=False), key)),
        every_after=_lock(caps, key, _order_limit(_narrow_with(blocked_plain, blocked_after, key, sa.select(key.table), swept=True), key)),
        first=caps.insert_ignoring_duplicate(table, "source_id").values(source_id=sid, **taking),
        first_many=_first_many(table, caps),
        one_shot=_precompiled(_one_shot(table, key, caps, blocked_plain, blocked_after, cursor=False)),
        one_shot_after=_precompiled(_one_shot(table, key, caps, blocked_plain, blocked_after, cursor=True)),
        one_shot_keys=_precompiled(_one_shot(table, key, caps, blocked_plain, blocked_after, cursor=False, keyed=True)),
        again=sa.update(table).where(w.source_id == sid, w.execution_status == UNFINISHED).values(**taking),
        over=sa.update(table).where(w.source_id == sid, w.execution_status == WORKING, expired).values(**taking),
        expired=sa.select(w.source_id)
        .where(w.lease_expires_at <= caps.now(), w.execution_status == WORKING)
        .limit(sa.bindparam("dbw_limit", type_=sa.Integer())),
        renew=sa.update(table).where(held).values(lease_expires_at=caps.now_plus_param("dbw_lease")),
        complete=sa.update(table).where(held).values(
            execution_status=sa.bindparam("dbw_status", type_=w.execution_status.type),
            claim_token=None,
            lease_expires_at=None,
            error=sa.bindparam("dbw_error", type_=w.error.type),
        ),
    )
    _STATEMENTS[cache_key] = built
    return built


def _precompiled(statement: Any) -> Precompiled | None:
    return None if statement is None else Precompiled(statement)


def _first_many(table: sa.Table, caps: dialects.Capabilities) -> Any:
    if caps.name != "postgresql":
        return None
    w = table.c
    rows = sa.select(
        sa.func.unnest(sa.bindparam("dbw_sids", type_=postgresql.ARRAY(w.source_id.type))),
        sa.literal(WORKING),
        sa.func.unnest(sa.bindparam("dbw_tokens", type_=postgresql.ARRAY(sa.String()))),
        caps.now_plus_param("dbw_lease"),
        sa.null(),
    )
    columns = ["source_id", "execution_status", "claim_token", "lease_expires_at", "error"]
    return (
        postgresql.insert(table)
        .from_select(columns, rows)
        .on_conflict_do_nothing(index_elements=["source_id"])
        .returning(w.source_id)
    )


def _one_shot(
    table: sa.Table,
    key: sa.Column[Any],
    caps: dialects.Capabilities,
    blocked_plain: sa.ColumnElement[bool],
    blocked_after: sa.ColumnElement[bool],
    *,
    cursor: bool,
    keyed: bool = False,
) -> Any:
    """Every claimable row in key order, taken in one autocommitted statement (PostgreSQL 13+).

    A CTE locks the candidates FOR UPDATE SKIP LOCKED; an INSERT ... ON CONFLICT DO UPDATE
    takes each one whose record is absent, unfinished or expired (decided on the latest row
    version, as the separate statements do); the result lists every candidate in key order
    with its new token (NULL when another process won it) and its previous status. One
    round trip instead of BEGIN, SET, SELECT, INSERT and COMMIT.
    """
    if caps.name != "postgresql" or not caps.gen_random_uuid:
        return None
    w = table.c
    previous = sa.select(w.execution_status).where(w.source_id == key).scalar_subquery()
    candidates = _narrow_with(blocked_plain, blocked_after, key, sa.select(key.table), swept=cursor)
    if keyed:
        candidates = candidates.where(_named(key))
    candidates = candidates.add_columns(
        previous.label("dbw_previous"),
        # This statement's own transaction commits without waiting for the disk (see relax).
        sa.func.set_config("synchronous_commit", "off", sa.true()).label("dbw_relax"),
    )
    c = _lock(caps, key, _order_limit(candidates, key)).cte("dbw_candidates")
    cid = c.c[key.name]
    rows = sa.select(
        cid,
        sa.literal(WORKING),
        sa.cast(sa.func.gen_random_uuid(), sa.String()),
        caps.now_plus_param("dbw_lease"),
        sa.null(),
    )
    insert = postgresql.insert(table).from_select(
        ["source_id", "execution_status", "claim_token", "lease_expires_at", "error"], rows
    )
    expired = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    taken = (
        insert.on_conflict_do_update(
            index_elements=["source_id"],
            set_={
                "execution_status": WORKING,
                "claim_token": insert.excluded.claim_token,
                "lease_expires_at": insert.excluded.lease_expires_at,
                "error": None,
            },
            where=sa.or_(w.execution_status == UNFINISHED, sa.and_(w.execution_status == WORKING, expired)),
        )
        .returning(w.source_id, w.claim_token)
        .cte("dbw_taken")
    )
    return (
        sa.select(cid, taken.c.claim_token, c.c.dbw_previous)
        .select_from(c.outerjoin(taken, taken.c.source_id == cid))
        .order_by(cid)
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
    narrowed = _narrow(statements(table, key, caps), key, query, swept=after is not None)
    return narrowed if after is None else narrowed.params(dbw_after=after)


def _narrow(st: _Statements, key: sa.Column[Any], query: sa.Select[Any], *, swept: bool) -> sa.Select[Any]:
    return _narrow_with(st.blocked, st.blocked_after, key, query, swept=swept)


def _narrow_with(
    blocked_plain: sa.ColumnElement[bool],
    blocked_after: sa.ColumnElement[bool],
    key: sa.Column[Any],
    query: sa.Select[Any],
    *,
    swept: bool,
) -> sa.Select[Any]:
    query = query.with_only_columns(key, maintain_column_froms=True)
    if swept:
        return query.where(key > sa.bindparam("dbw_after", type_=key.type), ~blocked_after)
    return query.where(~blocked_plain)


def _named(key: sa.Column[Any]) -> sa.ColumnElement[bool]:
    """``key`` is one of ``dbw_keys``: keys as PostgreSQL writes them as text (notifications)."""
    texts = sa.bindparam("dbw_keys", type_=postgresql.ARRAY(sa.Text()))
    return key == sa.any_(sa.cast(texts, postgresql.ARRAY(key.type)))


def _order_limit(query: sa.Select[Any], key: sa.Column[Any]) -> sa.Select[Any]:
    return query.order_by(key).limit(sa.bindparam("dbw_limit", type_=sa.Integer()))


def _lock(caps: dialects.Capabilities, key: sa.Column[Any], query: sa.Select[Any]) -> sa.Select[Any]:
    if caps.skip_locked:
        return query.with_for_update(skip_locked=True, of=key.table if caps.lock_of else None)
    return query


def top_key(conn: Connection, key: sa.Column[Any]) -> Any:
    """The source's highest key now (None: it has no rows), in a transaction of its own."""
    with conn.begin():
        return conn.execute(sa.select(sa.func.max(key))).scalar()


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
    keys: Sequence[Any] | None = None,
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
    st = statements(table, key, caps)
    lease = caps.seconds_value(lease_seconds)
    params: dict[str, Any] = {"dbw_limit": limit}
    one_shot = st.one_shot_keys if keys is not None else st.one_shot if after is None else st.one_shot_after
    if keys is not None:
        if caps.name == "postgresql":
            params["dbw_keys"] = list(keys)
        after = None
    if eligible is None and one_shot is not None and not conn.in_transaction():
        if after is not None:
            params["dbw_after"] = after
        params["dbw_lease"] = lease
        rows: Sequence[Any] = one_shot.execute(conn.execution_options(isolation_level="AUTOCOMMIT"), params).all()
        # Nothing to send in autocommit, but SQLAlchemy began a transaction of its own: ended,
        # so a next round on this connection is one statement too (and not a slower path
        # whose row locks would not outlive each statement).
        conn.commit()
        got = [
            Claim(source_id, token, taken_over=previous == WORKING)
            for source_id, token, previous in rows
            if token is not None
        ]
        return Round(got, len(rows), rows[-1][0] if rows else None, keys is None)
    if keys is not None:
        base = eligible_query(eligible, key)
        swept = False
        named = _named(key) if caps.name == "postgresql" else key.in_(list(keys))
        query = _narrow(st, key, base, swept=False).where(named)
        query = query.limit(sa.bindparam("dbw_limit", type_=sa.Integer()))
        query = _lock(caps, key, query if is_ordered(base) else query.order_by(key))
    elif eligible is None:  # prebuilt: every row of the source, in key order
        swept = True
        query = st.every if after is None else st.every_after
    else:
        base = eligible_query(eligible, key)
        swept = not is_ordered(base)
        query = _narrow(st, key, base, swept=swept and after is not None)
        query = _order_limit(query, key) if swept else query.limit(sa.bindparam("dbw_limit", type_=sa.Integer()))
        query = _lock(caps, key, query)
    if swept and after is not None:
        params["dbw_after"] = after
    taken: list[Claim] = []
    try:
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
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    order = {source_id: n for n, source_id in enumerate(candidates)}
    taken.sort(key=lambda c: order[c.source_id])  # hand items out in the query's order
    return Round(taken, len(candidates), candidates[-1] if candidates else None, swept)


def take_first_claims(conn: Connection, st: _Statements, source_ids: Sequence[Any], lease: Any) -> list[Claim]:
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
    return _take(conn, _for(conn, table), source_id, caps.seconds_value(lease_seconds))


def _take(conn: Connection, st: _Statements, source_id: Any, lease: Any) -> Claim | None:
    token = str(uuid.uuid4())
    params = {"dbw_sid": source_id, "dbw_token": token, "dbw_lease": lease}
    if dialects.inserted(conn.execute(st.first, params)):
        return Claim(source_id, token)
    if conn.execute(st.again, params).rowcount == 1:
        return Claim(source_id, token)
    if conn.execute(st.over, params).rowcount == 1:
        return Claim(source_id, token, taken_over=True)
    return None


def renew(conn: Connection, table: sa.Table, claims: Sequence[Claim], *, lease_seconds: float) -> list[Claim]:
    """Extend the leases of ``claims`` still held; commit; return the claims another process holds now.

    A claim whose item just ended (its handler committed while we renewed, before the
    coordinator heard of it) is not lost: its record has no token any more.
    """
    caps = dialects.of(conn)
    st = _for(conn, table)
    lease = caps.seconds_value(lease_seconds)
    lost: list[Claim] = []
    try:
        if st.relax is not None:
            conn.execute(st.relax)
        for c in claims:
            params = {"dbw_sid": c.source_id, "dbw_token": c.token, "dbw_lease": lease}
            if conn.execute(st.renew, params).rowcount != 1 and _held_by_another(conn, table, c):
                lost.append(c)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return lost


def _held_by_another(conn: Connection, table: sa.Table, claim: Claim) -> bool:
    token = conn.execute(sa.select(table.c.claim_token).where(table.c.source_id == claim.source_id)).first()
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
    return bool(conn.execute(_for(conn, table).complete, params).rowcount == 1)


class Precompiled:
    """One prebuilt statement, compiled once per dialect to the driver's SQL (the hot paths).

    For a statement whose shape never changes, SQLAlchemy's per-execution work (the cache
    key of the whole statement tree, the compiled-cache lookup, parameter and result
    processing) cost more client CPU than the database spends on it. This runs the
    compiled SQL through ``exec_driver_sql``, so errors are wrapped and dead connections
    invalidated as usual. When a bound value or a result column needs the type's
    processing (a key stored through a TypeDecorator, DateTime on SQLite, ...), it runs
    the statement the normal way instead.
    """

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._dialect: Any = None
        self._compiled: Any = None
        self._sql = ""
        self._fast = False

    def prepare(self, dialect: Any) -> None:
        """Compile for ``dialect`` now (else on first use)."""
        compiled = self.statement.compile(dialect=dialect)
        types = [bind.type for bind in compiled.binds.values()]
        results = [column[3] for column in getattr(compiled, "_result_columns", ())]
        self._fast = all(t.dialect_impl(dialect).bind_processor(dialect) is None for t in types) and all(
            t.dialect_impl(dialect).result_processor(dialect, None) is None for t in results
        )
        self._dialect, self._compiled, self._sql = dialect, compiled, str(compiled)

    def execute(self, conn: Connection, values: dict[str, Any]) -> sa.CursorResult[Any]:
        if conn.dialect is not self._dialect:
            self.prepare(conn.dialect)
        if not self._fast:
            return conn.execute(self.statement, values)
        compiled = self._compiled
        params: Any = compiled.construct_params(values)
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup)
        return conn.exec_driver_sql(self._sql, params)


class Completer:
    """``complete`` for one work table through ``Precompiled`` (a handler process's hot path)."""

    def __init__(self, table: sa.Table) -> None:
        self._table = table
        self._run: Precompiled | None = None

    def __call__(self, conn: Connection, claim: Claim, status: ExecutionStatus) -> bool:
        if self._run is None:
            self.prepare(conn)
        assert self._run is not None
        values = {"dbw_sid": claim.source_id, "dbw_token": claim.token, "dbw_status": status.value, "dbw_error": None}
        return bool(self._run.execute(conn, values).rowcount == 1)

    def prepare(self, conn: Connection) -> None:
        """Compile for ``conn``'s dialect now (else on first use)."""
        self._run = Precompiled(_for(conn, self._table).complete)
        self._run.prepare(conn.dialect)


def expired(conn: Connection, table: sa.Table, limit: int) -> list[Any]:
    """Up to ``limit`` items whose claim expired (their process died), in a transaction of its own.

    Read through the lease index: the cost is the same whatever the finished history, which
    has no lease. The sweep finds these items too, but only at its spaced-out wraps when
    they lie behind its cursor.
    """
    with conn.begin():
        return list(conn.execute(_for(conn, table).expired, {"dbw_limit": limit}).scalars())


def release(conn: Connection, table: sa.Table, claim: Claim) -> bool:
    """Give ``claim`` back at once (``unfinished``, no lease) so any process may take it; commits."""
    try:
        relax = _for(conn, table).relax
        if relax is not None:
            conn.execute(relax)
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


def _for(conn: Connection, table: sa.Table) -> _Statements:
    key = next(iter(table.c.source_id.foreign_keys)).column
    return statements(table, key, dialects.of(conn))
