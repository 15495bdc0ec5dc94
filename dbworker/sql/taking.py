"""Taking an item: the claim-path writes that make a claim, each naming the locks it takes.

A claim writes WORKING, a new token, a lease, its time (``changed_at``) and one more attempt: as the first record of
an item (``first``, ``first_many``), over an UNFINISHED record whose wait is over
(``again``), or over a WORKING record whose lease expired (``over``); ``one_shot`` does a
whole round in one statement where the server can. Each is a conditional write whose row
count (or returned keys) says whether this process won the item.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from dbworker.sql import candidates, dialects
from dbworker.sql import slots as slots_
from dbworker.sql.predicates import WORKING, claimed_by, due, lease_over, limit, sid, token

# Columns written by a first claim, in the order the INSERT ... SELECT forms list them.
_CLAIM_COLUMNS = ["source_id", "execution_status", "claim_token", "lease_expires_at", "error", "attempts", "claimed_by",
                  "changed_at"]


def _taking(table: sa.Table, caps: dialects.Capabilities, *, first: bool = False) -> dict[str, Any]:
    """The values a claim writes: WORKING, the token ``dbw_token``, a lease of ``dbw_lease``,
    one more attempt (the first, for a ``first`` claim), the claimer, and no wait.
    """
    w = table.c
    return {
        "execution_status": WORKING,
        "claim_token": token(table),
        "lease_expires_at": caps.now_plus_param("dbw_lease"),
        "error": None,
        "attempts": 1 if first else w.attempts + 1,
        "claimed_by": claimed_by(table),
        "changed_at": caps.now(),
        **({} if first else {"not_before": None}),
    }


def _first_rows(table: sa.Table, caps: dialects.Capabilities, source_id: Any, claim_token: Any) -> sa.Select[Any]:
    """The rows of an INSERT ... SELECT of first claims, in ``_CLAIM_COLUMNS``' order."""
    return sa.select(
        source_id,
        sa.literal(WORKING),
        claim_token,
        caps.now_plus_param("dbw_lease"),
        sa.null(),
        sa.literal(1),
        claimed_by(table),
        caps.now(),
    )


def first(table: sa.Table, caps: dialects.Capabilities) -> Any:
    """The first claim of ``dbw_sid``: an INSERT that does nothing when the record exists.

    Locks: the new work row until the commit; a concurrent first claim of the same item
    waits for this transaction, then inserts nothing. On a record that exists, PostgreSQL's
    ON CONFLICT DO NOTHING takes no lock, MySQL/MariaDB's INSERT IGNORE a shared one.
    SQLite: the database's write lock until the commit.

    On PostgreSQL and MySQL/MariaDB it inserts only where no record is committed when it
    runs (``_insert_unrecorded``; MySQL/MariaDB: INSERT IGNORE ... SELECT ... WHERE NOT
    EXISTS, whose read is a consistent one at READ COMMITTED): a candidate read that ran
    before another claim of the item committed still holds the item's source row, and ON
    CONFLICT or INSERT IGNORE would wait on a transaction writing that record (its
    handler's outcome, whose history row's foreign key check waits on that source row).
    """
    if caps.name == "postgresql":
        return _insert_unrecorded(table, _first_rows(table, caps, sid(table), token(table)), sid(table))
    if caps.reads_records_first:
        unrecorded = _unrecorded(table, _first_rows(table, caps, sid(table), token(table)), sid(table))
        return caps.insert_ignoring_duplicate(table, "source_id").from_select(_CLAIM_COLUMNS, unrecorded)
    return caps.insert_ignoring_duplicate(table, "source_id").values(source_id=sid(table), **_taking(table, caps, first=True))


def _unrecorded(table: sa.Table, rows: sa.Select[Any], source_id: Any) -> sa.Select[Any]:
    """The first claims ``rows`` of items ``source_id`` with no record (as the statement sees them)."""
    return rows.where(~sa.exists().where(table.c.source_id == source_id))


def _insert_unrecorded(table: sa.Table, rows: sa.Select[Any], source_id: Any) -> Any:
    """PostgreSQL's INSERT of first claims ``rows`` where ``source_id`` has no record (in the
    statement's snapshot; ON CONFLICT DO NOTHING for one inserted meanwhile); returns the keys."""
    insert = postgresql.insert(table).from_select(_CLAIM_COLUMNS, _unrecorded(table, rows, source_id))
    return insert.on_conflict_do_nothing(index_elements=["source_id"]).returning(table.c.source_id)


def first_many(table: sa.Table, caps: dialects.Capabilities) -> Any:
    """First claims of the items ``dbw_sids`` (tokens ``dbw_tokens``) in one INSERT, where the
    server can (``caps.first_claims_at_once``); else None.

    Returns the keys inserted. Locks: the new work rows until the commit; keys that already
    have a record are skipped without a lock (ON CONFLICT DO NOTHING), after waiting for a
    concurrent insert of the same key to end; keys with a committed record are left out
    before (``first``).
    """
    if not caps.first_claims_at_once:
        return None
    w = table.c
    new = sa.select(
        sa.func.unnest(sa.bindparam("dbw_sids", type_=postgresql.ARRAY(w.source_id.type))).label("sid"),
        sa.func.unnest(sa.bindparam("dbw_tokens", type_=postgresql.ARRAY(sa.String()))).label("token"),
    ).subquery("dbw_new")
    return _insert_unrecorded(table, _first_rows(table, caps, new.c.sid, new.c.token), new.c.sid)  # see ``first``


def one_shot(
    table: sa.Table,
    key: sa.Column[Any],
    caps: dialects.Capabilities,
    st: candidates.Blocking,
    *,
    cursor: bool,
    keyed: bool = False,
    traces: sa.Table | None = None,
) -> Any:
    """Every claimable row in key order, taken in one autocommitted statement, where the
    server can (``caps.one_statement_claims``); else None.

    A CTE selects the candidates; an INSERT ... ON CONFLICT DO UPDATE takes each one whose
    record is absent, unfinished or expired (decided on the latest row version, as the
    separate statements do); the result lists every candidate in key order with its new
    token (NULL when another process won it) and its previous status. One round trip
    instead of BEGIN, SET, SELECT, INSERT and COMMIT. ``keyed``: only the rows ``dbw_keys``.
    ``traces`` (the source's trace table; tracing on): each row also has its claim's attempt
    count and the writer's stored ``traceparent`` (NULL: none), what the coordinator's span of
    the item needs, so that it costs no read of its own (``engine.spans``).

    Locks, until the statement ends: the candidate source rows FOR UPDATE OF the source
    SKIP LOCKED, the work rows it inserts, and every existing work row it meets (ON CONFLICT
    DO UPDATE locks a conflicting row even when its WHERE leaves it unchanged). The trace
    table is read without locks, from the statement's snapshot.
    """
    if not caps.one_statement_claims:
        return None
    w = table.c
    previous = sa.select(w.execution_status).where(w.source_id == key).scalar_subquery()
    found = candidates.narrow(st, key, sa.select(key.table), swept=cursor)
    if keyed:
        found = found.where(candidates.named_by_text(key))
    found = found.add_columns(
        previous.label("dbw_previous"),
        # This statement's own transaction commits without waiting for the disk (see relax).
        sa.func.set_config("synchronous_commit", "off", sa.true()).label("dbw_relax"),
    )
    c = candidates.lock(caps, key, candidates.in_key_order(found, key)).cte("dbw_candidates")
    cid = c.c[key.name]
    insert = postgresql.insert(table).from_select(
        _CLAIM_COLUMNS, _first_rows(table, caps, cid, sa.cast(sa.func.gen_random_uuid(), sa.String()))
    )
    taken = (
        _claim_on_conflict(table, caps, insert)
        .returning(w.source_id, w.claim_token, *([] if traces is None else [w.attempts]))
        .cte("dbw_taken")
    )
    rows = c.outerjoin(taken, taken.c.source_id == cid)
    if traces is None:
        return sa.select(cid, taken.c.claim_token, c.c.dbw_previous).select_from(rows).order_by(cid)
    rows = rows.outerjoin(traces, traces.c.source_id == cid)
    return (
        sa.select(cid, taken.c.claim_token, c.c.dbw_previous, taken.c.attempts, traces.c.traceparent)
        .select_from(rows)
        .order_by(cid)
    )


def again(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Claim ``dbw_sid`` again if its record is UNFINISHED and not waiting; the row count says whether it won.

    Locks: the work row by its primary key until the commit (on MySQL/MariaDB at READ
    COMMITTED, released at once when the row does not match). SQLite: the write lock.
    """
    w = table.c
    return dialects.update_by_key(table).where(w.source_id == sid(table), due(table, caps)).values(**_taking(table, caps))


def over(table: sa.Table, caps: dialects.Capabilities) -> sa.Update:
    """Take over ``dbw_sid`` if it is WORKING with an expired (or no) lease; the row count says whether it won.

    Locks: as ``again``.
    """
    w = table.c
    return (
        dialects.update_by_key(table)
        .where(w.source_id == sid(table), w.execution_status == WORKING, lease_over(table, caps))
        .values(**_taking(table, caps))
    )


def recorded(table: sa.Table, caps: dialects.Capabilities) -> sa.Select[Any] | None:
    """The records of the items ``dbw_sids`` (candidates whose first claim inserted nothing)
    as committed: each key, whether ``again`` can take it, whether ``over`` can
    (``caps.reads_records_first``; else None).

    Locks: none (a consistent read at READ COMMITTED).
    """
    if not caps.reads_records_first:
        return None
    w = table.c
    can_over = sa.and_(w.execution_status == WORKING, lease_over(table, caps))
    return sa.select(w.source_id, due(table, caps).label("dbw_again"), can_over.label("dbw_over")).where(
        w.source_id.in_(sa.bindparam("dbw_sids", expanding=True))
    )


def expired(table: sa.Table, caps: dialects.Capabilities) -> sa.Select[Any]:
    """Up to ``dbw_limit`` keys of WORKING items whose lease expired, through the lease index.

    Locks: none (a plain read).
    """
    w = table.c
    return sa.select(w.source_id).where(w.lease_expires_at <= caps.now(), w.execution_status == WORKING).limit(limit())


def limited_round(table: sa.Table, slots: sa.Table, key: sa.Column[Any], caps: dialects.Capabilities) -> Any:
    """A limited claim round's writes in one statement, where the server can
    (``caps.first_claims_at_once``); else None.

    The round planned its slot writes (``sql.slots.plan``): one row each of the arrays
    ``dbw_kinds``, ``dbw_keys``, ``dbw_slots``, ``dbw_fresh`` (insert a missing slot row, else
    update a free one naming its previous token ``dbw_previous`` and still free: for a rate
    slot, taken at least ``dbw_backs`` seconds ago, NULL for a concurrency slot), for the claim
    ``dbw_holders`` / ``dbw_tokens``. The statement makes them (an INSERT ignoring a
    duplicate, an UPDATE whose condition is the one-by-one retake's), then claims each
    candidate of ``dbw_sids`` / ``dbw_claims`` (tokens) whose every slot (``dbw_need`` of them)
    was won: a first claim, or over an UNFINISHED record whose wait is over or a WORKING one
    whose lease is over (as ``one_shot``). With ``dbw_set_mark`` it also keeps the worker's
    mark in the round row: ``dbw_mark``, or with ``dbw_to_top`` the source's highest key;
    with ``dbw_walked`` the time of the walk. Returns each claim made: its key, token and the
    record's previous status.

    Locks, until the commit (the round holds the round row): the slot rows written, the work
    rows inserted or updated (ON CONFLICT DO UPDATE locks a conflicting row even when its
    WHERE leaves it unchanged), the round row. A slot a concurrent writer holds is waited
    for, then its condition is checked on the new row version, so two takers never both win.
    """
    if not caps.first_claims_at_once:
        return None
    s, w = slots.c, table.c
    array = postgresql.ARRAY

    # Bound untyped and cast in the SQL: psycopg sends lists and booleans as they are, so no
    # SQLAlchemy processing is needed and the statement runs as compiled driver SQL (Precompiled).
    def bound(name: str, kind: Any) -> Any:
        return sa.cast(sa.bindparam(name, type_=sa.types.NullType()), kind)

    def unnest(name: str, kind: Any) -> Any:
        return sa.func.unnest(bound(name, array(kind)))

    ops = sa.select(
        unnest("dbw_kinds", sa.Integer()).label("kind"),
        unnest("dbw_keys", s.limit_key.type).label("limit_key"),
        unnest("dbw_slots", sa.Integer()).label("slot"),
        unnest("dbw_fresh", sa.Boolean()).label("fresh"),
        unnest("dbw_previous", s.claim_token.type).label("previous"),
        unnest("dbw_backs", sa.Float()).label("back"),
        unnest("dbw_holders", w.source_id.type).label("holder"),
        unnest("dbw_tokens", s.claim_token.type).label("token"),
    ).cte("dbw_slot_writes")
    columns = ["kind", "limit_key", "slot", "source_id", "claim_token", "taken_at"]
    fresh = sa.select(ops.c.kind, ops.c.limit_key, ops.c.slot, ops.c.holder, ops.c.token, caps.now()).where(ops.c.fresh)
    inserted = (
        postgresql.insert(slots)
        .from_select(columns, fresh)
        .on_conflict_do_nothing()
        .returning(s.claim_token)
        .cte("dbw_inserted")
    )
    still_free = sa.or_(
        sa.and_(ops.c.back.is_not(None), s.taken_at <= caps.now_plus_seconds(ops.c.back)),
        sa.and_(ops.c.back.is_(None), ~slots_.holding(slots, table)),
    )
    updated = (
        sa.update(slots)
        .where(s.kind == ops.c.kind, s.limit_key == ops.c.limit_key, s.slot == ops.c.slot, sa.not_(ops.c.fresh),
               s.claim_token.is_not_distinct_from(ops.c.previous), still_free)
        .values(source_id=ops.c.holder, claim_token=ops.c.token, taken_at=caps.now())
        .returning(s.claim_token)
        .cte("dbw_updated")
    )  # fmt: skip
    won_tokens = sa.union_all(sa.select(inserted.c.claim_token), sa.select(updated.c.claim_token)).subquery()
    won = (
        sa.select(won_tokens.c.claim_token)
        .group_by(won_tokens.c.claim_token)
        .having(sa.func.count() == bound("dbw_need", sa.Integer()))
    )
    wanted = sa.select(
        unnest("dbw_sids", w.source_id.type).label("sid"),
        unnest("dbw_claims", s.claim_token.type).label("token"),
    ).subquery()
    previous = sa.select(w.execution_status).where(w.source_id == wanted.c.sid).scalar_subquery()
    cand = (
        sa.select(wanted.c.sid, wanted.c.token, previous.label("dbw_previous"))
        .where(wanted.c.token.in_(won))
        .cte("dbw_candidates")
    )
    insert = postgresql.insert(table).from_select(_CLAIM_COLUMNS, _first_rows(table, caps, cand.c.sid, cand.c.token))
    taken = (
        _claim_on_conflict(table, caps, insert)
        .returning(w.source_id, w.claim_token)
        .cte("dbw_taken")
    )
    round_row = [s.kind == slots_.ROUND_KIND, s.limit_key == "", s.slot == 0]
    mark = (
        sa.update(slots)
        .where(*round_row, bound("dbw_set_mark", sa.Boolean()))
        .values(
            source_id=sa.case(
                (bound("dbw_to_top", sa.Boolean()), sa.select(sa.func.max(key)).scalar_subquery()),
                else_=sa.bindparam("dbw_mark", type_=w.source_id.type),
            ),
            taken_at=sa.case((bound("dbw_walked", sa.Boolean()), caps.now()), else_=s.taken_at),
        )
        .returning(s.slot)
        .cte("dbw_mark")
    )
    return (
        sa.select(taken.c.source_id, taken.c.claim_token, cand.c.dbw_previous)
        .select_from(taken.join(cand, cand.c.sid == taken.c.source_id))
        .add_cte(mark)
    )


def _claim_on_conflict(table: sa.Table, caps: dialects.Capabilities, insert: postgresql.Insert) -> postgresql.Insert:
    """``insert`` of first claims that, where the record exists, claims it again if it is
    UNFINISHED and not waiting, or takes it over if its lease is over (PostgreSQL)."""
    w = table.c
    return insert.on_conflict_do_update(
        index_elements=["source_id"],
        set_={
            "execution_status": WORKING,
            "claim_token": insert.excluded.claim_token,
            "lease_expires_at": insert.excluded.lease_expires_at,
            "error": None,
            "attempts": w.attempts + 1,
            "not_before": None,
            "claimed_by": insert.excluded.claimed_by,
            "changed_at": insert.excluded.changed_at,
        },
        where=sa.or_(due(table, caps), sa.and_(w.execution_status == WORKING, lease_over(table, caps))),
    )
