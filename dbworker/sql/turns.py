"""A limited claim round's candidates read from the worker's mark: a bounded read, the turn rule in Python.

The mark is the lowest key that was claimable when a round last looked (kept in the round
row of the slots table, ``slots.take_turn``): below it every row then had a work record
that kept it from being claimed, or was not in the eligible query. So a round reads, in key
order, at most ``prefix_rows`` claimable rows from the mark, the rows below it whose work
record is claimable again (UNFINISHED or WORKING, through the status index: given back,
done waiting, lease over) and the rows wake-ups named; not every row of the source.

Over those rows the rule of docs/limits.md ("Fairness") is applied here (rank per key by
key order, room by the held slots read for just their keys). It is the rule over every
claimable row whenever the read reached the end of the claimable rows, or its first
``dbw_limit`` picks are all first rows of their keys (no row further on can come before
them); otherwise the caller falls back to the full read (``limited.fair_candidates``).
Rows below the mark that became claimable with no work record and no wake-up (a key
committed out of order without a notification, an eligible query that depends on the clock
or another table) are seen by the next full walk from the first row, at least every
``tuning.LIMIT_MARK_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from dbworker import limits as limits_
from dbworker.limits import Limit
from dbworker.sql import candidates, dialects, slots, statements
from dbworker.sql.precompiled import Precompiled
from dbworker.sql.states import UNFINISHED, WORKING

__all__ = ["Read", "held_by_key", "held_now", "key_column", "pick", "prefix_rows", "read", "read_statement"]

FROM_MARK, BELOW_MARK, NAMED = 0, 1, 2  # the parts of the read (``dbw_part``)


def prefix_rows(wanted: int) -> int:
    """How many rows from the mark a round reads: enough for the usual spread of keys."""
    return max(128, 8 * wanted)


def key_column(lim: Limit) -> sa.ColumnElement[str]:
    """A limit's key as the text the slots table keeps (NULL and '' are one key)."""
    if lim.key is None:
        return sa.literal("")
    return sa.func.coalesce(sa.cast(lim.key, sa.String()), "")


@dataclass
class Read:
    """What a round read: the claimable rows in key order (source key, key texts per limit),
    whether they are all there are (``complete``), and the lowest claimable key from the mark."""

    rows: list[tuple[Any, list[str]]]
    complete: bool
    lowest: Any
    # The slot rows of the keys read, by kind and key text, where they came with the read
    # (PostgreSQL: ``slots.by_key``); keys not here are read by the round when needed.
    slots: dict[int, dict[str, list[slots.Seen]]] = field(default_factory=dict)


_BUILT: dict[tuple[Any, ...], tuple[sa.Table, Sequence[Limit], Precompiled]] = {}


def read(
    conn: Connection, st: statements.Prebuilt, key: sa.Column[Any], table: sa.Table,
    query: sa.Select[Any], limits: Sequence[Limit], *, mark: Any, keys: Sequence[Any] | None,
    rows: int, fixed: bool = False,
) -> Read:  # fmt: skip
    """Of the eligible ``query`` (without an order of its own), up to ``rows`` claimable rows from ``mark`` (None: from the first row), those below it
    whose work record is claimable, and those named by ``keys``, in key order (one statement).
    ``fixed``: ``query`` is the same every round (every row of the source): the statement is
    built once (per shape: from the first row or the mark, with named rows or not) and run as
    compiled driver SQL where it can (``Precompiled``), not built every round (that cost more
    client CPU than the database spends on it).

    Locks: none (a plain read: the slot and claim writes decide).
    """
    caps = dialects.of(conn)
    params: dict[str, Any] = {}
    if mark is not None:
        params["dbw_mark"] = mark
    if keys and caps.keys_as_text:
        params["dbw_keys"] = list(keys)
    cacheable = fixed and (not keys or caps.keys_as_text)
    cache_key = (id(table), id(key), caps, mark is None, bool(keys), rows)
    built = _BUILT.get(cache_key) if cacheable else None
    if built is not None and built[0] is table and len(built[1]) == len(limits) \
            and all(a is b for a, b in zip(built[1], limits, strict=True)):  # fmt: skip
        found = built[2].execute(conn, params).all()
    else:
        statement = read_statement(st, key, table, query, limits, caps, from_mark=mark is not None, keys=keys, rows=rows)
        if cacheable:
            _BUILT[cache_key] = (table, tuple(limits), Precompiled(statement))
        found = conn.execute(statement, params).all()
    kinds = limits_.kinds(limits) if caps.first_claims_at_once else []
    return _parse(found, limits, kinds, rows)


def read_statement(
    st: statements.Prebuilt, key: sa.Column[Any], table: sa.Table, query: sa.Select[Any], limits: Sequence[Limit],
    caps: dialects.Capabilities, *, from_mark: bool, keys: Sequence[Any] | None, rows: int,
) -> sa.Select[Any]:  # fmt: skip
    """``read``'s statement: bound ``dbw_mark`` (``from_mark``) and ``dbw_keys`` (named rows, as text)."""
    base = query.order_by(None)
    texts = [key_column(lim).label(f"dbw_k{n}") for n, lim in enumerate(limits)]
    narrowed = candidates.narrow(st, key, base, swept=False).add_columns(*texts)
    bound = sa.bindparam("dbw_mark", type_=key.type)
    if not from_mark:
        parts = [(FROM_MARK, narrowed)]
    else:
        w = table.c
        # Not an IN list: an expanding one is rendered per execution, so the read could not
        # run as compiled driver SQL.
        ready = sa.select(w.source_id).where(
            sa.or_(w.execution_status == WORKING, w.execution_status == UNFINISHED), w.source_id < bound
        )
        parts = [
            (FROM_MARK, narrowed.where(key >= bound)),
            (BELOW_MARK, narrowed.where(key < bound, key.in_(ready))),
        ]
    if keys:
        parts.append((NAMED, narrowed.where(_named(key) if caps.keys_as_text else key.in_(list(keys)))))
    # Each part in key order up to ``rows`` (a subquery: a compound's members take no LIMIT
    # everywhere), then the whole in the database's key order (its collation, not Python's).
    members = [sa.select(part.add_columns(sa.literal(n).label("dbw_part")).order_by(key).limit(rows).subquery())
               for n, part in parts]  # fmt: skip
    kinds = limits_.kinds(limits) if caps.first_claims_at_once else []
    if kinds:  # with the slot rows of their keys, one row of arrays per key and kind (``slots.by_key``)
        found_rows = (members[0] if len(members) == 1 else sa.union_all(*members)).cte("dbw_found")
        slots_t = slots.slots_table(table)
        joined: sa.FromClause = found_rows
        extra = []
        for kind in kinds:
            text = found_rows.c[f"dbw_k{kind.limit}"]
            held = slots.by_key(slots_t, table, kind, caps, sa.select(text))
            joined = joined.outerjoin(held, held.c.limit_key == text)
            extra += [held.c.dbw_slot, held.c.dbw_holder, held.c.dbw_token, held.c.dbw_busy, held.c.dbw_lapsed]
        return sa.select(found_rows, *extra).select_from(joined).order_by(found_rows.c[key.name])
    union = (members[0] if len(members) == 1 else sa.union_all(*members)).subquery()
    return sa.select(union).order_by(union.c[key.name])


def _named(key: sa.Column[Any]) -> sa.ColumnElement[bool]:
    """``candidates.named_by_text`` (``key`` is one of ``dbw_keys``, keys as text), its array
    bound untyped and cast in the SQL: psycopg sends a list of strings as text[] as it is, so
    the read runs as compiled driver SQL (``Precompiled``)."""
    texts = sa.cast(sa.bindparam("dbw_keys", type_=sa.types.NullType()), postgresql.ARRAY(sa.Text()))
    return key == sa.any_(sa.cast(texts, postgresql.ARRAY(key.type)))


def _parse(found: Sequence[Any], limits: Sequence[Limit], kinds: Sequence[limits_.Kind], rows: int) -> Read:
    """``read``'s rows as a ``Read``."""
    width = 1 + len(limits)  # the key and its texts, then dbw_part
    counts = [0, 0, 0]
    read_slots: dict[int, dict[str, list[slots.Seen]]] = {kind.number: {} for kind in kinds}
    for row in found:
        for n, kind in enumerate(kinds):
            text = row[1 + kind.limit]
            # A text the slots table keeps otherwise (longer than its column) is left to the round.
            if limits_.key_text(text) == (text or "") and (text or "") not in read_slots[kind.number]:
                at = width + 1 + 5 * n
                read_slots[kind.number][text or ""] = slots.seen_of(*row[at : at + 5])
    by_key: dict[Any, list[str]] = {}
    last = -1  # the position of the last row read from the mark
    for row in found:
        part = row[width]
        counts[part] += 1
        if row[0] not in by_key:
            by_key[row[0]] = [limits_.key_text(t) for t in row[1:width]]
        if part == FROM_MARK:
            last = len(by_key) - 1
    # The mark moves to the lowest claimable row from it, or lower, to a named row below it
    # (say a key committed after a greater one): a round that leaves it (its key at its
    # limit) keeps reading it until it is taken.
    lowest = next((row[0] for row in found if row[width] in (FROM_MARK, NAMED)), None)
    if (
        counts[BELOW_MARK] >= rows
    ):  # more below the mark than read: not a prefix (``pick`` gives up)
        return Read([], False, lowest, read_slots)
    complete = counts[FROM_MARK] < rows
    ordered = list(by_key.items())
    if not complete:  # a prefix: no named row past the last one read from the mark
        ordered = ordered[: last + 1]
    return Read(ordered, complete, lowest, read_slots)


def pick(
    found: Read, limits: Sequence[Limit], held: Callable[[list[list[str]]], dict[int, dict[str, int]]], *,
    per_key: int, wanted: int, needed: int,
) -> list[tuple[Any, list[str]]] | None:  # fmt: skip
    """The first ``wanted`` rows by the turn rule (rank, then position) among ``found`` whose
    keys have room. From a prefix (not ``complete``) only first rows of their keys, and None
    unless at least ``needed`` (what the round takes at most) of them: rows not read could
    come before the rest (the caller reads every claimable row instead). ``held(texts)``: the live holders per concurrency kind of the
    keys of those rows' texts, asked for the next ``wanted`` rows in turn order at a time
    (usually once: most keys have room)."""
    fair = limits_.fair_limit(limits)
    concurrency = [kind for kind in limits_.kinds(limits) if kind.per is None]
    seen: dict[str, int] = {}
    ranked: list[tuple[int, int, Any, list[str]]] = []
    for position, (source_id, texts) in enumerate(found.rows):
        turn = texts[fair] if fair is not None else ""
        rank = seen[turn] = seen.get(turn, 0) + 1
        if rank <= per_key:
            ranked.append((rank, position, source_id, texts))
    ranked.sort(key=lambda r: (r[0], r[1]))
    chosen: list[tuple[int, int, Any, list[str]]] = []
    for start in range(0, len(ranked), wanted):
        batch = ranked[start : start + wanted]
        counts = held([texts for _, _, _, texts in batch])
        for rank, position, source_id, texts in batch:
            if all((rank if kind.limit == fair else 1) + counts[kind.number].get(texts[kind.limit], 0) <= kind.size
                   for kind in concurrency):  # fmt: skip
                chosen.append((rank, position, source_id, texts))
        if len(chosen) >= wanted:
            break
    chosen = chosen[:wanted]
    if not found.complete:
        # Rows not read come after every first row read (by position), before every second
        # row (by rank): the first rows alone are the rule's first picks, if enough.
        chosen = [pick for pick in chosen if pick[0] == 1]
        if len(chosen) < min(needed, wanted):
            return None
    return [(source_id, texts) for _, _, source_id, texts in chosen]


def held_by_key(
    slots_t: sa.Table, work: sa.Table, kind: limits_.Kind, caps: dialects.Capabilities
) -> sa.Select[Any]:
    """(``limit_key``, ``dbw_n``): the keys holding slots of ``kind`` now and how many (``limited.held``,
    grouped over the kind's slot rows)."""
    s = slots_t.c
    now = held_now(slots_t, work, kind, caps)
    return (
        sa.select(s.limit_key, sa.func.count().label("dbw_n"))
        .where(s.kind == kind.number, now)
        .group_by(s.limit_key)
    )


def held_now(
    slots_t: sa.Table, work: sa.Table, kind: limits_.Kind, caps: dialects.Capabilities
) -> sa.ColumnElement[bool]:
    """A slot row of ``kind`` is held now: for concurrency, by a live lease; for rate, taken
    within the period."""
    if kind.per is None:
        return slots.holding(slots_t, work, caps)
    return slots_t.c.taken_at > caps.now_plus(-kind.per)
