"""A claim round of a worker with limits: fair candidates, and for each a slot of every limit.

The candidates are the claimable rows of the eligible query (every row without one) with
each limit's key, ranked so that claims take turns between keys (``fair_candidates``); each
is taken only once a slot of every limit was won (``sql.slots``), in the same transaction
as the claim. The rule and semantics are docs/limits.md's; the limits' checks ``limits``'.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker import limits as limits_
from dbworker import tuning
from dbworker.limits import Limit
from dbworker.sql import candidates, dialects, items, slots, statements, taking, transactions, turns
from dbworker.sql.items import Claim
from dbworker.sql.precompiled import Precompiled
from dbworker.sql.states import WORKING
from dbworker.sql.turns import held_by_key, held_now, key_column

__all__ = ["claim", "fair_candidates", "held", "held_by_key", "held_now", "key_column", "startable"]


def partition_column(lim: Limit) -> sa.ColumnElement[Any]:
    """What a keyed limit's rows are grouped by for turns: its key text, or the key itself when
    that is not a string (the same groups: such a value's text is never '', so NULL stays
    alone; sorting numbers is several times cheaper than sorting their texts in a collation)."""
    if isinstance(getattr(lim.key, "type", None), sa.String):
        return key_column(lim)
    return lim.key  # type: ignore[no-any-return]


def fair_candidates(
    st: statements.Prebuilt, key: sa.Column[Any], table: sa.Table, eligible: Callable[[], sa.Select[Any]] | None,
    limits: Sequence[Limit], caps: dialects.Capabilities, *, per_key: int,
) -> sa.Select[Any]:  # fmt: skip
    """Up to ``dbw_limit`` claimable keys with their limits' key texts, in turns between keys.

    Rule: each claimable row has a position (the eligible query's order, else key order) and
    a rank among the rows of its key (of the first keyed limit) by that position; rows are
    taken by rank, then position: the first waiting row of every key in turn, in the order of
    those rows, then the second of every key, and so on. Only ``per_key`` rows of a key are
    looked at, no more of the fair key than its free concurrency slots, and none of a key
    whose slots of another concurrency limit are all held.

    Locks: none (a plain read: the slot and claim writes decide).
    """
    base = statements.eligible_query(eligible, key)
    inner = candidates.narrow(st, key, base.order_by(None), swept=False)
    texts = [key_column(lim).label(f"dbw_k{n}") for n, lim in enumerate(limits)]
    fair = limits_.fair_limit(limits)
    turns = [partition_column(limits[fair]).label("dbw_turn")] if fair is not None else []
    # The position: the query's own order (a window over it), else the key itself (unique).
    order = list(getattr(base, "_order_by_clauses", ()))  # see candidates.is_ordered
    position = (sa.func.row_number().over(order_by=order) if order else key).label("dbw_pos")
    inner_sq = inner.add_columns(*texts, *turns, position).subquery()
    partition = [inner_sq.c.dbw_turn] if fair is not None else None
    rank = sa.func.row_number().over(partition_by=partition, order_by=inner_sq.c.dbw_pos).label("dbw_rank")
    ranked = sa.select(inner_sq, rank).subquery()
    slots_t = slots.slots_table(table)
    # Room left per key: a row of the fair key is looked at only if its rank fits in the slots
    # not held now; other concurrency limits leave out keys with every slot held. The held
    # counts are read once per kind (grouped over its slot rows) and joined, not counted per
    # claimable row: a correlated count per row made PostgreSQL's estimate big enough to JIT.
    joined: sa.FromClause = ranked
    room = []
    for kind in limits_.kinds(limits):
        if kind.per is not None:
            continue
        counts = held_by_key(slots_t, table, kind, caps).subquery(f"dbw_held{kind.number}")
        joined = joined.outerjoin(counts, counts.c.limit_key == ranked.c[f"dbw_k{kind.limit}"])
        used = ranked.c.dbw_rank if kind.limit == fair else sa.literal(1)
        room.append(used + sa.func.coalesce(counts.c.dbw_n, 0) <= kind.size)
    columns = [ranked.c[key.name], *(ranked.c[f"dbw_k{n}"] for n in range(len(limits)))]
    return (
        sa.select(*columns)
        .select_from(joined)
        .where(ranked.c.dbw_rank <= per_key, *room)
        .order_by(ranked.c.dbw_rank, ranked.c.dbw_pos)
        .limit(sa.bindparam("dbw_limit", type_=sa.Integer(), literal_execute=True))
    )


def held(
    slots_t: sa.Table, work: sa.Table, key_text: Any, kind: limits_.Kind, caps: dialects.Capabilities
) -> sa.ColumnElement[int]:
    """How many slots of ``kind`` the key ``key_text`` holds now (read, not locked)."""
    s = slots_t.c
    now = held_now(slots_t, work, kind, caps)
    return sa.select(sa.func.count()).where(s.kind == kind.number, s.limit_key == key_text, now).scalar_subquery()


def startable(
    conn: Connection, *, table: sa.Table, key: sa.Column[Any], eligible: Callable[[], sa.Select[Any]] | None,
    limits: Sequence[Limit], cap: int,
) -> int:  # fmt: skip
    """How many claimable rows more pods could start now, counting at most ``cap``: rows
    waiting only on a limit are not counted (no key more than its limit's number, none of a
    key whose concurrency slots are all held, no more than a key=None concurrency limit).

    Locks: none (a plain read in a transaction of its own).
    """
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    fair = limits_.fair_limit(limits)
    query = fair_candidates(st, key, table, eligible, limits, caps, per_key=limits_.per_key(limits, fair, cap))
    with transactions.committed(conn):
        n = len(conn.execute(query, {"dbw_limit": cap}).all())
    whole = [lim.concurrency for lim in limits if not lim.keyed and lim.concurrency is not None]
    return min(n, *whole) if whole else n


def claim(
    conn: Connection,
    *,
    table: sa.Table,
    key: sa.Column[Any],
    eligible: Callable[[], sa.Select[Any]] | None,
    limits: Sequence[Limit],
    limit: int,
    lease: Any,
    keys: Sequence[Any] | None = None,
) -> tuple[list[Claim], int]:
    """Claim up to ``limit`` items within ``limits`` in one transaction, which this commits;
    return them (in turn order) and how many candidates were seen. ``keys``: rows named by
    wake-ups, looked at wherever the worker's mark is (``sql.turns``).

    Locks: the round row, and the slot rows and work rows written, until the commit (see
    ``slots.take_turn``, ``slots.take`` and ``items.claim``). Candidates are read without
    locks: the conditional writes decide.
    """
    caps = dialects.of(conn)
    st = statements.prebuilt(table, key, caps)
    fair = limits_.fair_limit(limits)
    per_key = limits_.per_key(limits, fair, limit)
    wanted = max(2 * limit, limit + 8)
    kinds = limits_.kinds(limits)
    slots_t = slots.slots_table(table)
    writes = _round_writes(table, slots_t, key, caps)
    taken: list[Claim] = []
    with transactions.committed(conn):
        turn = slots.take_turn(conn, slots_t, fresh_seconds=tuning.LIMIT_MARK_SECONDS)
        rows, seen, mark = _candidates(conn, st, key, table, eligible, limits, caps, turn, keys=keys, per_key=per_key,
                                       wanted=wanted, needed=limit)  # fmt: skip
        if writes is not None:
            taken = _claim_in_one_statement(conn, writes, slots_t, table, rows, seen, kinds, limit, lease, mark)
            return taken, len(rows)
        if mark is not None and mark.to_top:
            top = conn.execute(statements.top_key(key)).scalar()
            mark = _Mark(top, mark.walked) if top != turn.mark or mark.walked else None
        if mark is not None:
            slots.set_mark(conn, slots_t, mark.value, walked=mark.walked)
        full: set[tuple[int, str]] = set()
        won: list[tuple[Any, str]] = []  # (source key, token) whose slots were all won
        for source_id, row_texts in rows:
            if len(won) >= limit:
                break
            needed = [(kind, row_texts[kind.limit]) for kind in kinds]
            if any((kind.number, text) in full for kind, text in needed):
                continue
            token = _take_slots(conn, slots_t, table, needed, full, seen, source_id)
            if token is not None:
                won.append((source_id, token))
        taken = _claim_all(conn, st, won, lease)
    return taken, len(rows)


@dataclass(frozen=True)
class _Mark:
    """Where a round moves the worker's mark: ``value``, or the source's highest key (``to_top``);
    ``walked``: the round read from the first row."""

    value: Any
    walked: bool
    to_top: bool = False


_ROUND_WRITES: dict[tuple[int, int, dialects.Capabilities], tuple[sa.Table, Precompiled | None]] = {}


def _round_writes(
    table: sa.Table, slots_t: sa.Table, key: sa.Column[Any], caps: dialects.Capabilities
) -> Precompiled | None:
    """``taking.limited_round`` for ``table``, built once per server kind (None where it cannot run)."""
    cache_key = (id(table), id(key), caps)
    found = _ROUND_WRITES.get(cache_key)
    if found is None or found[0] is not table:
        writes = taking.limited_round(table, slots_t, key, caps)
        found = _ROUND_WRITES[cache_key] = (table, None if writes is None else Precompiled(writes))
    return found[1]


def _claim_in_one_statement(
    conn: Connection, writes: Precompiled, slots_t: sa.Table, table: sa.Table, rows: list[tuple[Any, list[str]]],
    seen: dict[int, dict[str, list[slots.Seen]]], kinds: Sequence[limits_.Kind], limit: int, lease: Any,
    mark: _Mark | None,
) -> list[Claim]:  # fmt: skip
    """The round's slot writes, claims and mark in one statement (``taking.limited_round``):
    the slots of up to ``limit`` candidates, in turn order, planned from what the round read
    (``slots.plan``), then written and claimed together. A planned slot found taken at the
    write (it cannot be, in turn, but the write checks) leaves its candidate unclaimed this
    round, as a refused claim does."""
    full: set[tuple[int, str]] = set()
    won: list[tuple[Any, str]] = []
    writes_: list[slots.Planned] = []
    holders: list[tuple[Any, str]] = []
    for source_id, row_texts in rows:
        if len(won) >= limit:
            break
        needed = [(kind, row_texts[kind.limit]) for kind in kinds]
        if any((kind.number, text) in full for kind, text in needed):
            continue
        planned: list[slots.Planned] = []
        for kind, text in needed:
            write = slots.plan(conn, table, kind=kind.number, key=text, size=kind.size, per=kind.per,
                               seen=seen[kind.number][text])  # fmt: skip
            if write is None:
                full.add((kind.number, text))
                break
            planned.append(write)
        else:
            token = str(uuid.uuid4())
            for write in planned:
                slots.planned(seen[write.kind][write.key], write, source_id, token)
                writes_.append(write)
                holders.append((source_id, token))
            won.append((source_id, token))
    if not won and mark is None:
        return []
    params = {
        "dbw_kinds": [p.kind for p in writes_], "dbw_keys": [p.key for p in writes_],
        "dbw_slots": [p.slot for p in writes_], "dbw_fresh": [p.fresh for p in writes_],
        "dbw_previous": [p.previous for p in writes_], "dbw_backs": [p.back for p in writes_],
        "dbw_holders": [h for h, _ in holders], "dbw_tokens": [t for _, t in holders],
        "dbw_need": len(kinds), "dbw_sids": [s for s, _ in won], "dbw_claims": [t for _, t in won],
        "dbw_lease": lease, "dbw_set_mark": mark is not None, "dbw_mark": mark.value if mark is not None else None,
        "dbw_to_top": mark is not None and mark.to_top, "dbw_walked": mark is not None and mark.walked,
    }  # fmt: skip
    result: Any = writes.execute(conn, params)
    got = {source_id: Claim(source_id, token, taken_over=previous == WORKING) for source_id, token, previous in result}
    return [got[source_id] for source_id, _ in won if source_id in got]


def _candidates(
    conn: Connection, st: statements.Prebuilt, key: sa.Column[Any], table: sa.Table,
    eligible: Callable[[], sa.Select[Any]] | None, limits: Sequence[Limit], caps: dialects.Capabilities,
    turn: slots.Turn, *, keys: Sequence[Any] | None, per_key: int, wanted: int, needed: int,
) -> tuple[list[tuple[Any, list[str]]], dict[int, dict[str, list[slots.Seen]]], _Mark | None]:  # fmt: skip
    """A round's candidates in turn order with the slot rows of their keys, and where the
    worker's mark moves (None: it stays): read from the
    worker's mark (``sql.turns``; the mark moves to the lowest claimable row seen), else,
    when that read cannot decide the turns or the query has an order of its own, every
    claimable row (``fair_candidates``)."""
    kinds = limits_.kinds(limits)
    slots_t = slots.slots_table(table)
    seen: dict[int, dict[str, list[slots.Seen]]] = {kind.number: {} for kind in kinds}

    def held(texts: list[list[str]]) -> dict[int, dict[str, int]]:
        """Read the slot rows of the keys of ``texts`` not read yet; live holders per kind and key."""
        for kind in kinds:
            missing = [row for row in texts if row[kind.limit] not in seen[kind.number]]
            if missing:
                seen[kind.number].update(_read(conn, slots_t, table, kind, missing))
        return {kind.number: {text: sum(1 for r in rows if r.busy and not r.lapsed) for text, rows in seen[kind.number].items()}
                for kind in kinds}  # fmt: skip

    rows: list[tuple[Any, list[str]]] | None = None
    moved: _Mark | None = None
    query = statements.eligible_query(eligible, key)
    if not candidates.is_ordered(query):
        mark = turn.mark if turn.fresh else None
        found = turns.read(conn, st, key, table, query, limits, mark=mark, keys=keys, rows=turns.prefix_rows(wanted),
                           fixed=eligible is None)  # fmt: skip
        for number, by_key in found.slots.items():
            seen[number].update(by_key)
        if found.lowest is None:  # every row from the mark is blocked: the next round starts at the top
            moved = _Mark(None, walked=mark is None, to_top=True)
        elif found.lowest != turn.mark or mark is None:
            moved = _Mark(found.lowest, walked=mark is None)
        rows = turns.pick(found, limits, held, per_key=per_key, wanted=wanted, needed=needed)
    if rows is None:
        query = fair_candidates(st, key, table, eligible, limits, caps, per_key=per_key)
        rows = [(row[0], [limits_.key_text(t) for t in row[1:]]) for row in conn.execute(query, {"dbw_limit": wanted})]
    # Every slot row the round may take, read once per kind and key (not once per candidate).
    held([row_texts for _, row_texts in rows])
    return rows, seen, moved


def _read(
    conn: Connection, slots_t: sa.Table, table: sa.Table, kind: limits_.Kind, texts: list[list[str]]
) -> dict[str, list[slots.Seen]]:
    keys = sorted({row_texts[kind.limit] for row_texts in texts})
    return slots.read(conn, slots_t, table, kind=kind.number, keys=keys, per=kind.per)


def _take_slots(
    conn: Connection, slots_t: sa.Table, table: sa.Table, needed: list[tuple[limits_.Kind, str]],
    full: set[tuple[int, str]], seen: dict[int, dict[str, list[slots.Seen]]], source_id: Any,
) -> str | None:  # fmt: skip
    """The slots of one candidate under a new claim token (returned); None if one failed (a
    full limit is added to ``full``)."""
    token = str(uuid.uuid4())
    for kind, text in needed:
        if not slots.take(conn, slots_t, table, kind=kind.number, key=text, size=kind.size, per=kind.per,
                          source_id=source_id, token=token, seen=seen[kind.number][text]):  # fmt: skip
            full.add((kind.number, text))
            return None
    return token


def _claim_all(conn: Connection, st: statements.Prebuilt, won: list[tuple[Any, str]], lease: Any) -> list[Claim]:
    """The claims of the candidates whose slots were won, under the slots' tokens, in turn
    order: first claims in one statement where the server can (PostgreSQL), the rest one by
    one. Slots won for a claim that was not made (the item was cancelled or reset since the
    round read it) name a claim that never was: a concurrency slot stays free, a rate slot
    counts as a start; the round takes one item fewer."""
    taken: list[Claim] = []
    rest = won
    if st.first_many is not None and len(won) > 1:
        taken = items.claim_first_many(conn, st, [s for s, _ in won], lease, tokens=[t for _, t in won])
        first = {c.source_id for c in taken}
        rest = [(s, t) for s, t in won if s not in first]
    taken += items.claim_each(conn, st, [s for s, _ in rest], lease, tokens=[t for _, t in rest])
    order = {source_id: n for n, (source_id, _) in enumerate(won)}
    return sorted(taken, key=lambda c: order[c.source_id])
