"""The ``<name>_slots`` table of a worker with limits, and taking one slot in a claim's transaction.

A slot row is (kind, key text, slot number) with the claim that took it (``source_id``,
``claim_token``) and when (``taken_at``, the server's clock). The primary key makes slot
numbers ``0 .. size-1`` the only places a claim can take, so no interleaving of claims
holds more than ``size`` of them. A concurrency slot is held while its claim's work record
is WORKING with that token: the outcome (which clears the token) frees it in the outcome's
own transaction, and a claim whose lease expired is fenced out (its record given back) by
the claim that takes its slot. A rate slot is held for ``per`` seconds from ``taken_at``.
Which limits and keys a claim needs is ``sql.limited``'s.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.limits import Kind
from dbworker.sql import dialects, names, tables, transactions
from dbworker.sql.precompiled import Precompiled
from dbworker.sql.states import UNFINISHED, WORKING


def table_name(worker: str) -> str:
    return names.identifier(f"{worker}_slots")


def slots_table(work: sa.Table) -> sa.Table:
    """The slots table beside the work table ``work`` (same MetaData, same key type), defined once."""
    existing = defined(work)
    if existing is not None:
        return existing
    return sa.Table(
        table_name(work.name.removesuffix("_work")),
        work.metadata,
        sa.Column("kind", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("limit_key", sa.String(191), primary_key=True),
        sa.Column("slot", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("source_id", work.c.source_id.type, nullable=True),
        sa.Column("claim_token", sa.String(tables.TOKEN_LENGTH), nullable=True),
        sa.Column("taken_at", tables.MICROSECONDS, nullable=False),
        info={"dbworker_work": work.name},
    )


def defined(work: sa.Table) -> sa.Table | None:
    """The slots table beside ``work`` if its worker has limits (registration defined it), else None."""
    return work.metadata.tables.get(table_name(work.name.removesuffix("_work")))


def holding(slots: sa.Table, work: sa.Table, caps: dialects.Capabilities | None = None) -> sa.ColumnElement[bool]:
    """The slot's claim is the item's current one (WORKING with that token); with ``caps``,
    also with a live lease (a slot no claim can free now)."""
    s, w = slots.c, work.c
    live = [w.lease_expires_at > caps.now()] if caps is not None else []
    return (
        sa.select(sa.literal(1))
        .where(w.source_id == s.source_id, w.claim_token == s.claim_token, w.execution_status == WORKING, *live)
        .exists()
    )


def _expired(slots: sa.Table, work: sa.Table, caps: dialects.Capabilities) -> sa.ColumnElement[bool]:
    """The slot's claim is current but its lease is over (its process died, or lost the database)."""
    s, w = slots.c, work.c
    lapsed = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    return (
        sa.select(sa.literal(1))
        .where(w.source_id == s.source_id, w.claim_token == s.claim_token, w.execution_status == WORKING, lapsed)
        .exists()
    )


def _flag(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.case((condition, 1), else_=0)


@dataclass
class Seen:
    """A slot row as a round read it: its number, holder, and whether its claim holds it now
    (``busy``) with a lease that is over (``lapsed``). A round updates it as it takes slots."""

    slot: int
    holder: Any
    token: str | None
    busy: bool
    lapsed: bool


def read(
    conn: Connection, slots: sa.Table, work: sa.Table, *, kind: int, keys: Sequence[str], per: float | None
) -> dict[str, list[Seen]]:
    """The slot rows of ``kind`` for each of ``keys`` (one statement for a whole round).

    Locks: none (a plain read; ``take``'s conditional writes decide)."""
    caps = dialects.of(conn)
    s = slots.c
    if per is None:
        busy = _flag(holding(slots, work))
        lapsed = _flag(_expired(slots, work, caps))
    else:
        busy = _flag(s.taken_at > caps.now_plus_param("dbw_back"))
        lapsed = sa.literal(0)
    found: dict[str, list[Seen]] = {key: [] for key in keys}
    query = sa.select(s.limit_key, s.slot, s.source_id, s.claim_token, busy, lapsed).where(
        s.kind == kind, s.limit_key.in_(sorted(found))
    )
    params = {"dbw_back": caps.seconds_value(-per)} if per is not None else {}
    for key, slot, holder, token, is_busy, is_lapsed in conn.execute(query, params):
        found[key].append(Seen(slot, holder, token, bool(is_busy), bool(is_lapsed)))
    return found


def by_key(
    slots: sa.Table, work: sa.Table, kind: Kind, caps: dialects.Capabilities, keys: sa.Select[Any]
) -> sa.Subquery:
    """``read``'s rows of ``kind`` for the key texts ``keys`` selects, one row per key with
    arrays (PostgreSQL): ``limit_key``, then ``dbw_slot``, ``dbw_holder``, ``dbw_token``,
    ``dbw_busy``, ``dbw_lapsed``, each an array in the same order. A subquery for a round's
    candidate read to join, so the slot rows of its keys come with it (``turns.read``).

    Locks: none (a plain read; the round's conditional writes decide)."""
    s = slots.c
    if kind.per is None:
        busy, lapsed = _flag(holding(slots, work)), _flag(_expired(slots, work, caps))
    else:
        busy, lapsed = _flag(s.taken_at > caps.now_plus(-kind.per)), sa.literal(0)
    def agg(column: Any) -> Any:  # psycopg returns arrays as lists: no SQLAlchemy processing
        return sa.func.array_agg(column, type_=sa.types.NullType())

    return (
        sa.select(s.limit_key, agg(s.slot).label("dbw_slot"), agg(s.source_id).label("dbw_holder"),
                  agg(s.claim_token).label("dbw_token"), agg(busy).label("dbw_busy"),
                  agg(lapsed).label("dbw_lapsed"))
        .where(s.kind == kind.number, s.limit_key.in_(keys))
        .group_by(s.limit_key)
        .subquery(f"dbw_slots{kind.number}")
    )  # fmt: skip


def seen_of(slot: Any, holder: Any, token: Any, busy: Any, lapsed: Any) -> list[Seen]:
    """A key's slot rows from the arrays of ``by_key`` (None: it has none)."""
    if slot is None:
        return []
    return [Seen(n, h, t, bool(b), bool(x)) for n, h, t, b, x in zip(slot, holder, token, busy, lapsed, strict=True)]


def take(
    conn: Connection, slots: sa.Table, work: sa.Table, *, kind: int, key: str, size: int, per: float | None,
    source_id: Any, token: str, seen: list[Seen] | None = None,
) -> bool:  # fmt: skip
    """Take a free slot of (``kind``, ``key``) among ``size`` for the claim (``source_id``,
    ``token``); no commit. False when every slot is held (or, after a limit was lowered, as
    many are held as the new size). ``seen``: the key's rows as ``read`` returned them earlier
    in this round (else they are read now); updated with the slot taken.

    A concurrency slot (``per`` None) is free when its claim is not current; one whose claim's
    lease is over is freed by giving that item back first (UNFINISHED, no token: its process,
    if alive, has its commit refused, and its renewals find the claim lost once the item is
    claimed again; until then a record with no token reads as an item that ended). A rate slot is
    free ``per`` seconds after it was taken. A row seen busy may have been freed since (then
    this round leaves it alone: it only misses a slot); one seen free is checked again by the
    write.

    Locks: the slot row written (INSERT, or UPDATE by primary key) until the commit; a
    concurrent taker of the same slot waits, then finds it taken (the UPDATE's condition names
    the previous token, so it matches at most one taker). Given-back work rows by key.
    SQLite: the write lock.
    """
    caps = dialects.of(conn)
    if seen is None:
        seen = read(conn, slots, work, kind=kind, keys=[key], per=per)[key]
    back = caps.seconds_value(-per) if per is not None else None
    free = _free(conn, work, caps, seen, size)
    if free is None:
        return False
    values = {"source_id": source_id, "claim_token": token, "taken_at": caps.now()}
    present = {row.slot for row in seen}
    for slot in range(size):
        if slot not in present:
            insert = caps.insert_ignoring_duplicate(slots, "kind", "limit_key", "slot")
            if dialects.inserted(conn.execute(insert.values(kind=kind, limit_key=key, slot=slot, **values))):
                seen.append(Seen(slot, source_id, token, busy=True, lapsed=False))
                return True
    update = _retake(slots, work, caps, rate=per is not None)
    for row in free:
        params = {"dbw_kind": kind, "dbw_key": key, "dbw_slot": row.slot, "dbw_previous": row.token,
                  "dbw_holder": source_id, "dbw_token": token}  # fmt: skip
        if back is not None:
            params["dbw_back"] = back
        if conn.execute(update, params).rowcount == 1:
            row.holder, row.token, row.busy = source_id, token, True
            return True
    return False


@dataclass(frozen=True)
class Planned:
    """A slot write a round planned (``plan``), made with the round's claims in one statement
    (``taking.limited_round``): insert the missing slot row ``slot`` (``fresh``), else update
    the free one naming its ``previous`` token; ``back``: a rate slot's -``per`` seconds."""

    kind: int
    key: str
    slot: int
    fresh: bool
    previous: str | None
    back: float | None


def plan(
    conn: Connection, work: sa.Table, *, kind: int, key: str, size: int, per: float | None, seen: list[Seen]
) -> Planned | None:
    """Which slot of (``kind``, ``key``) among ``size`` a claim would take, as ``take`` chooses
    it from ``seen`` (the key's rows as ``read`` returned them in this round), without taking
    it; None when every slot is held. Expired claims holding one are given back first, as
    ``take`` does. ``planned`` records the choice in ``seen`` once the claim's every slot was
    planned.

    Locks: the work rows given back (by key), until the commit.
    """
    caps = dialects.of(conn)
    free = _free(conn, work, caps, seen, size)
    if free is None:
        return None
    back = caps.seconds_value(-per) if per is not None else None
    present = {row.slot for row in seen}
    missing = next((slot for slot in range(size) if slot not in present), None)
    if missing is not None:
        return Planned(kind, key, missing, True, None, back)
    if free:
        return Planned(kind, key, free[0].slot, False, free[0].token, back)
    return None


def planned(seen: list[Seen], write: Planned, source_id: Any, token: str) -> None:
    """Record in ``seen`` that the claim (``source_id``, ``token``) takes the slot of ``write``."""
    for row in seen:
        if row.slot == write.slot:
            row.holder, row.token, row.busy, row.lapsed = source_id, token, True, False
            return
    seen.append(Seen(write.slot, source_id, token, busy=True, lapsed=False))


_RETAKE: weakref.WeakKeyDictionary[sa.Table, dict[tuple[str, bool], sa.Update]] = weakref.WeakKeyDictionary()


def _retake(slots: sa.Table, work: sa.Table, caps: dialects.Capabilities, *, rate: bool) -> sa.Update:
    """The UPDATE that takes a free slot row (by primary key, naming its previous token, and
    still free), built once per slots table: a round runs one per item it takes."""
    built = _RETAKE.setdefault(slots, {})
    update = built.get((caps.name, rate))
    if update is None:
        s = slots.c
        still_free = s.taken_at <= caps.now_plus_param("dbw_back") if rate else ~holding(slots, work)
        previous = sa.bindparam("dbw_previous", type_=s.claim_token.type)
        update = built[(caps.name, rate)] = (
            sa.update(slots)
            .where(s.kind == sa.bindparam("dbw_kind", type_=s.kind.type),
                   s.limit_key == sa.bindparam("dbw_key", type_=s.limit_key.type),
                   s.slot == sa.bindparam("dbw_slot", type_=s.slot.type),
                   s.claim_token.is_not_distinct_from(previous), still_free)
            .values(source_id=sa.bindparam("dbw_holder", type_=s.source_id.type),
                    claim_token=sa.bindparam("dbw_token", type_=s.claim_token.type), taken_at=caps.now())
        )  # fmt: skip
    return update


ROUND_KIND = -1  # the row a limited claim round locks first (kind, '', 0)


@dataclass(frozen=True)
class Turn:
    """The round row as a round found it: the worker's mark (``sql.turns``: the lowest key
    claimable when a round last looked, None: from the first row) and whether it was set by
    a walk from the first row less than ``fresh_seconds`` ago."""

    mark: Any
    fresh: bool


def take_turn(conn: Connection, slots: sa.Table, *, fresh_seconds: float = 0.0) -> Turn:
    """Wait for this worker's turn to claim: one limited claim round at a time, fleet-wide.

    Rounds of one worker share slot rows (a key=None limit: every round the same ones) and
    take them in candidate order: run at once they deadlock. In turn, each round's reads
    (READ COMMITTED: each statement sees what the previous round committed) meet what its
    writes will, so a claim does not lose its item after winning its slots. Returns the
    round row's mark (``set_mark``).

    On PostgreSQL it also has the rest of the transaction's statements planned for their
    values (``plan_cache_mode``; see ``_turn_query``).

    Locks: the round row FOR UPDATE until the commit (created once, INSERT ignoring a
    duplicate). SQLite: the database's write lock (a write that changes nothing), then the
    round row is read.
    """
    caps = dialects.of(conn)
    s = slots.c
    sqlite = caps.name == "sqlite"
    if sqlite:
        conn.execute(sa.update(slots).where(sa.false()).values(slot=s.slot))
    query = _turn_query(slots, caps, fresh_seconds)
    row: Any = query.execute(conn, {}).first()
    if row is None:
        insert = caps.insert_ignoring_duplicate(slots, "kind", "limit_key", "slot")
        conn.execute(insert.values(kind=ROUND_KIND, limit_key="", slot=0, taken_at=caps.now()))
        row = query.execute(conn, {}).first()
    return Turn(row[0], bool(row[1])) if row is not None else Turn(None, False)


_TURN: weakref.WeakKeyDictionary[sa.Table, dict[tuple[str, float], Precompiled]] = weakref.WeakKeyDictionary()


def _turn_query(slots: sa.Table, caps: dialects.Capabilities, fresh_seconds: float) -> Precompiled:
    """``take_turn``'s read of the round row (FOR UPDATE but on SQLite), built once per slots table."""
    built = _TURN.setdefault(slots, {})
    query = built.get((caps.name, fresh_seconds))
    if query is None:
        s = slots.c
        fresh = _flag(s.taken_at > caps.now_plus(-fresh_seconds))
        # PostgreSQL: the round's next statements (its candidate read above all) are planned
        # for their values, in this transaction only. The driver prepares a statement run
        # often, and the server's generic plan for the read, not knowing that ``dbw_mark``
        # leaves only the newest rows, took ~14 ms where the plan for the value took ~2 ms.
        custom = [sa.func.set_config("plan_cache_mode", "force_custom_plan", sa.true())] if caps.name == "postgresql" else []
        select = sa.select(s.source_id, fresh, *custom).where(s.kind == ROUND_KIND, s.limit_key == "", s.slot == 0)
        query = built[(caps.name, fresh_seconds)] = Precompiled(select if caps.name == "sqlite" else select.with_for_update())
    return query


def set_mark(conn: Connection, slots: sa.Table, mark: Any, *, walked: bool) -> None:
    """Keep ``mark`` in the round row (in this round's transaction, which holds it); with
    ``walked`` (read from the first row) also when, so the next walk is due in turn."""
    caps = dialects.of(conn)
    s = slots.c
    values: dict[str, Any] = {"source_id": mark}
    if walked:
        values["taken_at"] = caps.now()
    conn.execute(
        sa.update(slots)
        .where(s.kind == ROUND_KIND, s.limit_key == "", s.slot == 0)
        .values(**values)
    )


def prune(conn: Connection, slots: sa.Table, work: sa.Table, kinds: Sequence[Kind], *, batch: int) -> int:
    """Delete up to ``batch`` free slot rows of each of ``kinds`` (a concurrency slot whose
    claim is not current; a rate slot taken more than its ``per`` ago), committed; how many.

    A free slot row is only a place a claim can take: ``take`` inserts a missing one, so
    keys that no longer run leave no rows behind. Done in this worker's turn (``take_turn``):
    no round is between reading a slot and writing it, so none can be taking a row this
    deletes, and the delete's condition is the read's (a row taken since is left alone).
    Rows of kinds this registration does not have (another deploy's) are left alone.

    Locks: the round row, then the slot rows deleted, until the commit. Keys are read first
    and deleted by key: MariaDB refuses a LIMIT in a subquery of IN.
    """
    caps = dialects.of(conn)
    s = slots.c
    deleted = 0
    with transactions.committed(conn):
        take_turn(conn, slots)
        for kind in kinds:
            free = ~holding(slots, work) if kind.per is None else s.taken_at <= caps.now_plus(-kind.per)
            where = [s.kind == kind.number, free]
            rows = conn.execute(sa.select(s.limit_key, s.slot).where(*where).limit(batch)).all()
            if rows:
                which = sa.tuple_(s.limit_key, s.slot).in_([tuple(row) for row in rows])
                deleted += int(conn.execute(sa.delete(slots).where(*where, which)).rowcount)
    return deleted


def _free(conn: Connection, work: sa.Table, caps: dialects.Capabilities, seen: list[Seen], size: int) -> list[Seen] | None:
    """The slots of ``seen`` free to take, below ``size``, after giving back the items whose
    claim holding one expired; None when ``size`` slots are held."""
    held = 0
    free: list[Seen] = []
    for row in seen:
        if row.busy and row.lapsed and _give_back(conn, work, caps, row.holder, row.token):
            row.busy = row.lapsed = False
        if row.busy:
            held += 1
        elif row.slot < size:
            free.append(row)
    return None if held >= size else free


def _give_back(conn: Connection, work: sa.Table, caps: dialects.Capabilities, source_id: Any, token: str | None) -> bool:
    """End the claim ``token`` of ``source_id`` if its lease is over: the item is UNFINISHED
    and claimable again. True if it did (the slot is then free)."""
    w = work.c
    lapsed = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    update = (
        dialects.update_by_key(work)
        .where(w.source_id == source_id, w.claim_token == token, w.execution_status == WORKING, lapsed)
        .values(execution_status=UNFINISHED, claim_token=None, lease_expires_at=None, not_before=None)
    )
    return conn.execute(update).rowcount == 1
