"""Which rows a claim may take: the candidate queries, each naming the locks it takes.

A candidate is a row of the source that the eligible query returns (every row without
one) whose work record, if any, does not keep it from being claimed now (``blocked``). The
queries select only the source key: the sweep's next rows in key order from a cursor, an
ordered eligible query's rows from its lowest claimable key, or the rows named by wake-ups.
Taking them is ``taking``'s; the work table's prebuilt forms are ``statements``'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from dbworker.sql import dialects
from dbworker.sql.predicates import DONE, UNFINISHED, WORKING, limit


class Blocking(Protocol):
    """A work table's two ``blocked`` conditions, built once (``Blocked``; ``statements.Prebuilt`` has them too)."""

    @property
    def blocked(self) -> sa.ColumnElement[bool]: ...

    @property
    def blocked_after(self) -> sa.ColumnElement[bool]: ...


@dataclass(frozen=True)
class Blocked:
    """``blocked`` for a work table, without and with the sweep's cursor."""

    blocked: sa.ColumnElement[bool]
    blocked_after: sa.ColumnElement[bool]

    @classmethod
    def build(cls, table: sa.Table, key: sa.ColumnElement[Any], caps: dialects.Capabilities) -> Blocked:
        return cls(blocked(table, key, caps, cursor=False), blocked(table, key, caps, cursor=True))


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


def every(st: Blocking, key: sa.Column[Any], caps: dialects.Capabilities, *, cursor: bool) -> sa.Select[Any]:
    """eligible=None: up to ``dbw_limit`` claimable source keys in key order (after ``dbw_after`` with ``cursor``).

    Locks: where SKIP LOCKED is available, the selected source rows FOR UPDATE (OF the
    source where the server allows), skipping rows another claimer holds, until the commit.
    Elsewhere none (the conditional writes decide).
    """
    return lock(caps, key, in_key_order(narrow(st, key, sa.select(key.table), swept=cursor), key))


class EligibleNotSelect(TypeError):
    """The application's eligible() returned something other than a ``select()``: an error
    of the application's, not of the database (the claim engine says so once)."""


def eligible_query(eligible: Callable[[], sa.Select[Any]] | None, key: sa.Column[Any]) -> sa.Select[Any]:
    """The application's eligible query (called afresh), or every row of the source."""
    query = sa.select(key.table) if eligible is None else eligible()
    if not isinstance(query, sa.Select):
        raise EligibleNotSelect(
            f"eligible() returned {type(query).__name__}: it must return a select() over the source table "
            f"{key.table.name}, e.g. sqlalchemy.select(Model).where(...) (a text() or a string is not one)"
        )
    return query


def is_ordered(query: sa.Select[Any]) -> bool:
    """Whether the application's query fixes an order of its own.

    SQLAlchemy has no public reader of a query's ORDER BY; ``Select.compare`` against the
    query without one costs about four times building the query, on every claim. So this
    reads ``_order_by_clauses`` (a test pins it: ``tests/unit/test_statements.py``).
    """
    return bool(getattr(query, "_order_by_clauses", ()))


def eligible_candidates(
    st: Blocking, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, *, cursor: bool,
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
        narrowed = narrow(st, key, query, swept=False)
        if low:
            # Inlined, so the server plans for the actual key (a range near the top of the
            # key index) rather than for any key, where it might walk the query's own index.
            narrowed = narrowed.where(key >= sa.bindparam("dbw_low", type_=key.type, literal_execute=True))
        return lock(caps, key, narrowed.limit(limit()))
    return lock(caps, key, in_key_order(narrow(st, key, query, swept=cursor), key))


def first_candidate(
    st: Blocking, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, *, bound: bool | None
) -> sa.Select[Any]:
    """The lowest claimable key of ``query`` in key order, its own order aside: where an
    ordered query's candidates start. ``bound``: None from the first row; False after
    ``dbw_after``; True from it.

    Locks: none (a plain read; the claim that follows locks what it takes).
    """
    narrowed = narrow(st, key, query.order_by(None), swept=False)
    if bound is not None:
        after = sa.bindparam("dbw_after", type_=key.type, literal_execute=True)
        narrowed = narrowed.where(key >= after if bound else key > after)
    return narrowed.order_by(key).limit(1)


def named_candidates(
    st: Blocking, key: sa.Column[Any], query: sa.Select[Any], caps: dialects.Capabilities, keys: Sequence[Any],
    *, locked: bool = True,
) -> sa.Select[Any]:
    """Up to ``dbw_limit`` claimable keys of ``query`` among ``keys``, in its order or else key order.

    Where keys are named as text (``caps.keys_as_text``) they are bound as ``dbw_keys``;
    elsewhere ``keys`` are the key values, rendered as an IN list.

    Locks: as ``eligible_candidates``; none with ``locked=False`` (a plain read: which named
    rows a round skipped because another transaction held them).
    """
    named = named_by_text(key) if caps.keys_as_text else key.in_(list(keys))
    narrowed = narrow(st, key, query, swept=False).where(named).limit(limit())
    ordered = narrowed if is_ordered(query) else narrowed.order_by(key)
    return lock(caps, key, ordered) if locked else ordered


def narrow(st: Blocking, key: sa.Column[Any], query: sa.Select[Any], *, swept: bool) -> sa.Select[Any]:
    """``query`` selecting only the source key, of rows no work record blocks (after
    ``dbw_after``, with ``swept``)."""
    query = query.with_only_columns(key, maintain_column_froms=True)
    if swept:
        return query.where(key > sa.bindparam("dbw_after", type_=key.type), ~st.blocked_after)
    return query.where(~st.blocked)


def named_by_text(key: sa.Column[Any]) -> sa.ColumnElement[bool]:
    """``key`` is one of ``dbw_keys``: keys as PostgreSQL writes them as text (notifications)."""
    texts = sa.bindparam("dbw_keys", type_=postgresql.ARRAY(sa.Text()))
    return key == sa.any_(sa.cast(texts, postgresql.ARRAY(key.type)))


def in_key_order(query: sa.Select[Any], key: sa.Column[Any]) -> sa.Select[Any]:
    """The first ``dbw_limit`` rows of ``query`` in key order."""
    return query.order_by(key).limit(limit())


def lock(caps: dialects.Capabilities, key: sa.Column[Any], query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` FOR UPDATE SKIP LOCKED (OF the source where the server allows), where the server has it."""
    if caps.skip_locked:
        return query.with_for_update(skip_locked=True, of=key.table if caps.lock_of else None)
    return query
