"""One builder per claim-path statement, each naming the locks it takes, and their runner.

``prebuilt`` builds a work table's statements once per kind of server, with bound ``dbw_*``
parameters; ``Precompiled`` runs the hot ones as compiled driver SQL. Binding values,
running, committing and reading results is ``claims``'; per-server answers are ``dialects``'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from dbworker.sql import claimer, dialects, states
from dbworker.sql.states import DONE, UNFINISHED, WORKING

# Columns written by a first claim, in the order the INSERT ... SELECT forms list them.
_CLAIM_COLUMNS = ["source_id", "execution_status", "claim_token", "lease_expires_at", "error", "attempts", "claimed_by"]


@dataclass(frozen=True)
class Prebuilt:
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
    step_over: sa.Update


_PREBUILT: dict[tuple[int, int, dialects.Capabilities], Prebuilt] = {}


def prebuilt(table: sa.Table, key: sa.Column[Any], caps: dialects.Capabilities) -> Prebuilt:
    """The claim-path statements of ``table`` over the source key ``key`` (see ``Prebuilt``)."""
    cache_key = (id(table), id(key), caps)
    found = _PREBUILT.get(cache_key)
    if found is not None and found.table is table:
        return found
    blocked_plain = blocked(table, key, caps, cursor=False)
    blocked_after = blocked(table, key, caps, cursor=True)
    built = Prebuilt(
        table=table,
        blocked=blocked_plain,
        blocked_after=blocked_after,
        relax=dialects.relax_statement(caps),
        every=every(blocked_plain, blocked_after, key, caps, cursor=False),
        every_after=every(blocked_plain, blocked_after, key, caps, cursor=True),
        first=first(table, caps),
        first_many=first_many(table, caps),
        one_shot=_precompiled(one_shot(table, key, caps, blocked_plain, blocked_after, cursor=False)),
        one_shot_after=_precompiled(one_shot(table, key, caps, blocked_plain, blocked_after, cursor=True)),
        one_shot_keys=_precompiled(one_shot(table, key, caps, blocked_plain, blocked_after, cursor=False, keyed=True)),
        again=again(table, caps),
        over=over(table, caps),
        expired=expired(table, caps),
        renew=renew(table, caps),
        complete=complete(table, caps),
        step_over=step_over(table),
    )
    _PREBUILT[cache_key] = built
    return built


def of(conn: Connection, table: sa.Table) -> Prebuilt:
    """``prebuilt`` for ``table`` (its source key found through its foreign key) on ``conn``'s server."""
    key = next(iter(table.c.source_id.foreign_keys)).column
    return prebuilt(table, key, dialects.of(conn))


def _precompiled(statement: Any) -> Precompiled | None:
    return None if statement is None else Precompiled(statement)


# --- finding candidates ------------------------------------------------------------------


def blocked(table: sa.Table, key: sa.ColumnElement[Any], caps: dialects.Capabilities, *, cursor: bool) -> sa.ColumnElement[bool]:
    """EXISTS a work record that keeps ``key``'s row from being claimed now.

    Correlated on the work table's primary key, so its cost per candidate row is one index
    probe. With ``cursor`` the sweep's cursor (bound as ``dbw_after``) is repeated inside, so
    a planner that turns this into a merge anti-join starts the work table's index at the
    cursor too, not at its first finished row.

    Locks: none of its own. The enclosing query's FOR UPDATE does not reach it: it names the
    source table (OF) where the server allows, and MySQL/MariaDB lock no subquery's rows.
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
                # Waiting for a time (a retry delay, Unfinished(after=)): the same row's column.
                sa.and_(w.execution_status == UNFINISHED, w.not_before > caps.now()),
            ),
        )
        .exists()
    )


def every(
    blocked_plain: sa.ColumnElement[bool],
    blocked_after: sa.ColumnElement[bool],
    key: sa.Column[Any],
    caps: dialects.Capabilities,
    *,
    cursor: bool,
) -> sa.Select[Any]:
    """eligible=None: up to ``dbw_limit`` claimable source keys in key order (after ``dbw_after`` with ``cursor``).

    Locks: where SKIP LOCKED is available, the selected source rows FOR UPDATE (OF the
    source where the server allows), skipping rows another claimer holds, until the commit.
    Elsewhere none (the conditional writes decide).
    """
    return _lock(caps, key, _order_limit(_narrow_with(blocked_plain, blocked_after, key, sa.select(key.table), swept=cursor), key))


def eligible_query(eligible: Callable[[], sa.Select[Any]] | None, key: sa.Column[Any]) -> sa.Select[Any]:
    """The application's eligible query (called afresh), or every row of the source."""
    query = sa.select(key.table) if eligible is None else eligible()
    if not isinstance(query, sa.Select):
        raise TypeError(f"eligible() must return a select() over the source, got {type(query).__name__}")
    return query


def is_ordered(query: sa.Select[Any]) -> bool:
    """Whether the application's query fixes an order of its own."""
    return bool(getattr(query, "_order_by_clauses", ()))


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

    Locks: none (no FOR UPDATE, no limit); callers count or plan it.
    """
    narrowed = _narrow(prebuilt(table, key, caps), key, query, swept=after is not None)
    return narrowed if after is None else narrowed.params(dbw_after=after)


def eligible_candidates(
    st: Prebuilt, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, *, cursor: bool,
    low: bool = False,
) -> sa.Select[Any]:
    """Up to ``dbw_limit`` claimable keys of the application's eligible ``query``.

    An ordered query keeps its order and ignores the cursor; with ``low`` it looks only
    at keys from ``dbw_low`` (its lowest claimable key, see ``first_candidate``). An
    unordered one is walked in key order, after ``dbw_after`` with ``cursor``.

    Locks: as ``every``; on MariaDB (no FOR UPDATE OF) also the rows of every table the
    application's query joins.
    """
    if is_ordered(query):
        narrowed = _narrow(st, key, query, swept=False)
        if low:
            # Inlined, so the server plans for the actual key (a range near the top of the
            # key index) rather than for any key, where it might walk the query's own index.
            narrowed = narrowed.where(key >= sa.bindparam("dbw_low", type_=key.type, literal_execute=True))
        return _lock(caps, key, narrowed.limit(_limit()))
    return _lock(caps, key, _order_limit(_narrow(st, key, query, swept=cursor), key))


def first_candidate(
    st: Prebuilt, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, *, bound: bool | None
) -> sa.Select[Any]:
    """The lowest claimable key of ``query`` in key order, its own order aside: where an
    ordered query's candidates start. ``bound``: None from the first row; False after
    ``dbw_after``; True from it.

    Locks: none (a plain read; the claim that follows locks what it takes).
    """
    narrowed = _narrow(st, key, query.order_by(None), swept=False)
    if bound is not None:
        after = sa.bindparam("dbw_after", type_=key.type, literal_execute=True)
        narrowed = narrowed.where(key >= after if bound else key > after)
    return narrowed.order_by(key).limit(1)


def named_candidates(
    st: Prebuilt, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, keys: Sequence[Any]
) -> sa.Select[Any]:
    """Up to ``dbw_limit`` claimable keys of ``query`` among ``keys``, in its order or else key order.

    On PostgreSQL the keys are bound as text (``dbw_keys``, what notifications carry);
    elsewhere ``keys`` are the key values, rendered as an IN list.

    Locks: as ``eligible_candidates``.
    """
    named = _named(key) if caps.name == "postgresql" else key.in_(list(keys))
    narrowed = _narrow(st, key, query, swept=False).where(named).limit(_limit())
    return _lock(caps, key, narrowed if is_ordered(query) else narrowed.order_by(key))


def _narrow(st: Prebuilt, key: sa.Column[Any], query: sa.Select[Any], *, swept: bool) -> sa.Select[Any]:
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


def _limit() -> sa.BindParameter[int]:
    return sa.bindparam("dbw_limit", type_=sa.Integer())


def _order_limit(query: sa.Select[Any], key: sa.Column[Any]) -> sa.Select[Any]:
    return query.order_by(key).limit(_limit())


def _lock(caps: dialects.Capabilities, key: sa.Column[Any], query: sa.Select[Any]) -> sa.Select[Any]:
    if caps.skip_locked:
        return query.with_for_update(skip_locked=True, of=key.table if caps.lock_of else None)
    return query


# --- taking, renewing, completing --------------------------------------------------------


def _taking(table: sa.Table, caps: dialects.Capabilities, *, first: bool = False) -> dict[str, Any]:
    """The values a claim writes: WORKING, the token ``dbw_token``, a lease of ``dbw_lease``,
    one more attempt (the first, for a ``first`` claim), the claimer, and no wait.
    """
    w = table.c
    return {
        "execution_status": WORKING,
        "claim_token": sa.bindparam("dbw_token", type_=w.claim_token.type),
        "lease_expires_at": caps.now_plus_param("dbw_lease"),
        "error": None,
        "attempts": 1 if first else w.attempts + 1,
        "claimed_by": _claimer(table),
        **({} if first else {"not_before": None}),
    }


def _claimer(table: sa.Table) -> sa.BindParameter[Any]:
    """``dbw_claimer``: the claiming process's ``host:pid``, filled in at each execution."""
    return sa.bindparam("dbw_claimer", type_=table.c.claimed_by.type, callable_=claimer.identity)


def _due(table: sa.Table, caps: dialects.Capabilities) -> sa.ColumnElement[bool]:
    """An UNFINISHED record whose wait (if any) is over."""
    w = table.c
    return sa.and_(w.execution_status == UNFINISHED, sa.or_(w.not_before.is_(None), w.not_before <= caps.now()))


def _sid(table: sa.Table) -> sa.BindParameter[Any]:
    return sa.bindparam("dbw_sid", type_=table.c.source_id.type)


def _fenced(table: sa.Table) -> sa.ColumnElement[bool]:
    """The record of ``dbw_sid`` is WORKING under the token ``dbw_token`` (``states.fence``)."""
    return states.fence(table, _sid(table), sa.bindparam("dbw_token", type_=table.c.claim_token.type))


def _lease_over(table: sa.Table, caps: dialects.Capabilities) -> sa.ColumnElement[bool]:
    w = table.c
    return sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())


def first(table: sa.Table, caps: dialects.Capabilities) -> Any:
    """The first claim of ``dbw_sid``: an INSERT that does nothing when the record exists.

    Locks: the new work row until the commit; a concurrent first claim of the same item
    waits for this transaction, then inserts nothing. On a record that exists, PostgreSQL's
    ON CONFLICT DO NOTHING takes no lock, MySQL/MariaDB's INSERT IGNORE a shared one.
    SQLite: the database's write lock until the commit.
    """
    return caps.insert_ignoring_duplicate(table, "source_id").values(source_id=_sid(table), **_taking(table, caps, first=True))


def first_many(table: sa.Table, caps: dialects.Capabilities) -> Any:
    """PostgreSQL: first claims of the items ``dbw_sids`` (tokens ``dbw_tokens``) in one INSERT; else None.

    Returns the keys inserted. Locks: the new work rows until the commit; keys that already
    have a record are skipped without a lock (ON CONFLICT DO NOTHING), after waiting for a
    concurrent insert of the same key to end.
    """
    if caps.name != "postgresql":
        return None
    w = table.c
    rows = sa.select(
        sa.func.unnest(sa.bindparam("dbw_sids", type_=postgresql.ARRAY(w.source_id.type))),
        sa.literal(WORKING),
        sa.func.unnest(sa.bindparam("dbw_tokens", type_=postgresql.ARRAY(sa.String()))),
        caps.now_plus_param("dbw_lease"),
        sa.null(),
        sa.literal(1),
        _claimer(table),
    )
    return (
        postgresql.insert(table)
        .from_select(_CLAIM_COLUMNS, rows)
        .on_conflict_do_nothing(index_elements=["source_id"])
        .returning(w.source_id)
    )


def one_shot(
    table: sa.Table,
    key: sa.Column[Any],
    caps: dialects.Capabilities,
    blocked_plain: sa.ColumnElement[bool],
    blocked_after: sa.ColumnElement[bool],
    *,
    cursor: bool,
    keyed: bool = False,
) -> Any:
    """Every claimable row in key order, taken in one autocommitted statement (PostgreSQL 13+; else None).

    A CTE selects the candidates; an INSERT ... ON CONFLICT DO UPDATE takes each one whose
    record is absent, unfinished or expired (decided on the latest row version, as the
    separate statements do); the result lists every candidate in key order with its new
    token (NULL when another process won it) and its previous status. One round trip
    instead of BEGIN, SET, SELECT, INSERT and COMMIT. ``keyed``: only the rows ``dbw_keys``.

    Locks, until the statement ends: the candidate source rows FOR UPDATE OF the source
    SKIP LOCKED, the work rows it inserts, and every existing work row it meets (ON CONFLICT
    DO UPDATE locks a conflicting row even when its WHERE leaves it unchanged).
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
        sa.literal(1),
        _claimer(table),
    )
    insert = postgresql.insert(table).from_select(_CLAIM_COLUMNS, rows)
    taken = (
        insert.on_conflict_do_update(
            index_elements=["source_id"],
            set_={
                "execution_status": WORKING,
                "claim_token": insert.excluded.claim_token,
                "lease_expires_at": insert.excluded.lease_expires_at,
                "error": None,
                "attempts": w.attempts + 1,
                "not_before": None,
                "claimed_by": insert.excluded.claimed_by,
            },
            where=sa.or_(_due(table, caps), sa.and_(w.execution_status == WORKING, _lease_over(table, caps))),
        )
        .returning(w.source_id, w.claim_token)
        .cte("dbw_taken")
    )
    return (
        sa.select(cid, taken.c.claim_token, c.c.dbw_previous)
        .select_from(c.outerjoin(taken, taken.c.source_id == cid))
        .order_by(cid)
    )


def again(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Claim ``dbw_sid`` again if its record is UNFINISHED and not waiting; the row count says whether it won.

    Locks: the work row by its primary key until the commit (on MySQL/MariaDB at READ
    COMMITTED, released at once when the row does not match). SQLite: the write lock.
    """
    w = table.c
    return sa.update(table).where(w.source_id == _sid(table), _due(table, caps)).values(**_taking(table, caps))


def over(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Take over ``dbw_sid`` if it is WORKING with an expired (or no) lease; the row count says whether it won.

    Locks: as ``again``.
    """
    w = table.c
    return (
        sa.update(table)
        .where(w.source_id == _sid(table), w.execution_status == WORKING, _lease_over(table, caps))
        .values(**_taking(table, caps))
    )


def expired(table: sa.Table, caps: dialects.Capabilities) -> sa.Select[Any]:
    """Up to ``dbw_limit`` keys of WORKING items whose lease expired, through the lease index.

    Locks: none (a plain read).
    """
    w = table.c
    return sa.select(w.source_id).where(w.lease_expires_at <= caps.now(), w.execution_status == WORKING).limit(_limit())


def renew(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Extend the lease of ``dbw_sid`` by ``dbw_lease`` if the claim ``dbw_token`` still holds it.

    Locks: as ``again``.
    """
    return sa.update(table).where(_fenced(table)).values(lease_expires_at=caps.now_plus_param("dbw_lease"))


def complete(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Record ``dbw_status`` and ``dbw_error`` for ``dbw_sid`` if the claim ``dbw_token`` still holds it (the fence).

    Ends the claim (no token, no lease) and stamps ``ended_at`` unless the status is
    UNFINISHED (a claim given back). Locks: the work row until the caller's commit, which in
    a handler process is the handler's own transaction. SQLite: the write lock.
    """
    w = table.c
    status = sa.bindparam("dbw_status", type_=w.execution_status.type)
    return sa.update(table).where(_fenced(table)).values(
        ended_at=sa.case((status == UNFINISHED, w.ended_at), else_=caps.now()),
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
    return sa.update(table).where(_fenced(table)).values(
        execution_status=UNFINISHED,
        claim_token=None,
        lease_expires_at=None,
        error=None,
        traceback=None,
        not_before=None,
        attempts=0,
    )


def holder(table: sa.Table, source_id: Any) -> sa.Select[Any]:
    """The claim token recorded for ``source_id`` (after a renewal matched nothing). Locks: none."""
    return sa.select(table.c.claim_token).where(table.c.source_id == source_id)


def top_key(key: sa.Column[Any]) -> sa.Select[Any]:
    """The source's highest key (where a sweep that found nothing starts next). Locks: none."""
    return sa.select(sa.func.max(key))


def load_source(source: Any) -> sa.Select[Any]:
    """The claimed source row, by its key ``dbw_key``, as the handler receives it.

    Locks: none; it runs in the handler's transaction, whose own writes lock what they write.
    """
    key = sa.inspect(source).primary_key[0]
    return sa.select(source).where(key == sa.bindparam("dbw_key", type_=key.type))


# --- running -----------------------------------------------------------------------------


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
        """Run the statement on ``conn`` with ``values`` (compiling first for a new dialect)."""
        if conn.dialect is not self._dialect:
            self.prepare(conn.dialect)
        if not self._fast:
            return conn.execute(self.statement, values)
        compiled = self._compiled
        params: Any = compiled.construct_params(values)
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup)
        return conn.exec_driver_sql(self._sql, params)
