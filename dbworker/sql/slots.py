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

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects, names, tables
from dbworker.sql.states import UNFINISHED, WORKING


def table_name(worker: str) -> str:
    return names.identifier(f"{worker}_slots")


def slots_table(work: sa.Table) -> sa.Table:
    """The slots table beside the work table ``work`` (same MetaData, same key type), defined once."""
    name = table_name(work.name.removesuffix("_work"))
    existing = work.metadata.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(
        name,
        work.metadata,
        sa.Column("kind", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("limit_key", sa.String(191), primary_key=True),
        sa.Column("slot", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("source_id", work.c.source_id.type, nullable=True),
        sa.Column("claim_token", sa.String(tables.TOKEN_LENGTH), nullable=True),
        sa.Column("taken_at", tables.MICROSECONDS, nullable=False),
        info={"dbworker_work": work.name},
    )


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


def _where(slots: sa.Table, kind: int, key: str) -> list[sa.ColumnElement[bool]]:
    return [slots.c.kind == kind, slots.c.limit_key == key]


def take(
    conn: Connection, slots: sa.Table, work: sa.Table, *, kind: int, key: str, size: int, per: float | None,
    source_id: Any, token: str,
) -> bool:  # fmt: skip
    """Take a free slot of (``kind``, ``key``) among ``size`` for the claim (``source_id``,
    ``token``); no commit. False when every slot is held (or, after a limit was lowered, as
    many are held as the new size).

    A concurrency slot (``per`` None) is free when its claim is not current; one whose claim's
    lease is over is freed by giving that item back first (UNFINISHED, no token: its process,
    if alive, loses the claim at its next renewal and its commit is refused). A rate slot is
    free ``per`` seconds after it was taken.

    Locks: the slot row written (INSERT, or UPDATE by primary key) until the commit; a
    concurrent taker of the same slot waits, then finds it taken (the UPDATE's condition names
    the previous token, so it matches at most one taker). Given-back work rows by key.
    SQLite: the write lock.
    """
    caps = dialects.of(conn)
    s = slots.c
    back = caps.seconds_value(-per) if per is not None else None
    if per is None:
        busy = _flag(holding(slots, work))
        lapsed = _flag(_expired(slots, work, caps))
    else:
        busy = _flag(s.taken_at > caps.now_plus_param("dbw_back"))
        lapsed = sa.literal(0)
    rows = conn.execute(
        sa.select(s.slot, s.source_id, s.claim_token, busy, lapsed).where(*_where(slots, kind, key)),
        {"dbw_back": back} if back is not None else {},
    ).all()
    held = 0
    free: list[tuple[int, str | None]] = []
    for slot, holder, holder_token, is_busy, is_lapsed in rows:
        if is_busy and is_lapsed and _give_back(conn, work, caps, holder, holder_token):
            is_busy = 0
        if is_busy:
            held += 1
        elif slot < size:
            free.append((slot, holder_token))
    if held >= size:
        return False
    values = {"source_id": source_id, "claim_token": token, "taken_at": caps.now()}
    present = {row[0] for row in rows}
    for slot in range(size):
        if slot not in present:
            insert = caps.insert_ignoring_duplicate(slots, "kind", "limit_key", "slot")
            if dialects.inserted(conn.execute(insert.values(kind=kind, limit_key=key, slot=slot, **values))):
                return True
    still_free = ~holding(slots, work) if per is None else s.taken_at <= caps.now_plus_param("dbw_back")
    for slot, previous in free:
        update = (
            sa.update(slots)
            .where(*_where(slots, kind, key), s.slot == slot, s.claim_token == previous, still_free)
            .values(**values)
        )
        if conn.execute(update, {"dbw_back": back} if back is not None else {}).rowcount == 1:
            return True
    return False


ROUND_KIND = -1  # the row a limited claim round locks first (kind, '', 0)


def take_turn(conn: Connection, slots: sa.Table) -> None:
    """Wait for this worker's turn to claim: one limited claim round at a time, fleet-wide.

    Rounds of one worker share slot rows (a key=None limit: every round the same ones) and
    take them in candidate order: run at once they deadlock. In turn, each round's reads
    (READ COMMITTED: each statement sees what the previous round committed) meet what its
    writes will, so a claim does not lose its item after winning its slots.

    Locks: the round row FOR UPDATE until the commit (created once, INSERT ignoring a
    duplicate). SQLite: the database's write lock (a write that changes nothing).
    """
    caps = dialects.of(conn)
    s = slots.c
    if caps.name == "sqlite":
        conn.execute(sa.update(slots).where(sa.false()).values(slot=s.slot))
        return
    where = [s.kind == ROUND_KIND, s.limit_key == "", s.slot == 0]
    if conn.execute(sa.select(s.slot).where(*where).with_for_update()).first() is None:
        insert = caps.insert_ignoring_duplicate(slots, "kind", "limit_key", "slot")
        conn.execute(insert.values(kind=ROUND_KIND, limit_key="", slot=0, taken_at=caps.now()))
        conn.execute(sa.select(s.slot).where(*where).with_for_update())


def _give_back(conn: Connection, work: sa.Table, caps: dialects.Capabilities, source_id: Any, token: str) -> bool:
    """End the claim ``token`` of ``source_id`` if its lease is over: the item is UNFINISHED
    and claimable again. True if it did (the slot is then free)."""
    w = work.c
    lapsed = sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
    update = (
        sa.update(work)
        .where(w.source_id == source_id, w.claim_token == token, w.execution_status == WORKING, lapsed)
        .values(execution_status=UNFINISHED, claim_token=None, lease_expires_at=None, not_before=None)
    )
    return conn.execute(update).rowcount == 1
