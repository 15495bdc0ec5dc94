"""A work table's claim-path statements, built once per kind of server, and the source reads.

``prebuilt`` builds them with bound ``dbw_*`` parameters: which rows are candidates is
``candidates``', taking them ``taking``'s, the fenced writes ``fenced``'; ``Precompiled``
runs the hot ones as compiled driver SQL. Binding values, running, committing and reading
results is ``claims``'; per-server answers are ``dialects``'. Every builder keeps its name
here too (``statements.first``, ``statements.Precompiled``), for the modules that run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker.sql import dialects, traces
from dbworker.sql.candidates import (
    Blocked,
    blocked,
    eligible_candidates,
    eligible_query,
    every,
    first_candidate,
    is_ordered,
    named_candidates,
    narrow,
)
from dbworker.sql.fenced import complete, holders, renew_many, step_over
from dbworker.sql.precompiled import Precompiled
from dbworker.sql.predicates import DONE, UNFINISHED, WORKING
from dbworker.sql.taking import again, expired, first, first_many, one_shot, over, recorded

__all__ = [
    "DONE",
    "UNFINISHED",
    "WORKING",
    "Prebuilt",
    "Precompiled",
    "again",
    "blocked",
    "claimable",
    "complete",
    "eligible_candidates",
    "eligible_query",
    "every",
    "expired",
    "first",
    "first_candidate",
    "first_many",
    "holders",
    "is_ordered",
    "load_source",
    "named_candidates",
    "of",
    "one_shot",
    "over",
    "prebuilt",
    "renew_many",
    "step_over",
    "top_key",
]  # fmt: skip


@dataclass(frozen=True)
class Prebuilt:
    """The claim path's statements for one work table on one kind of server, built once.

    They take bound parameters (``dbw_*``), so the hot path only binds values: building
    SQLAlchemy expressions anew for every claim cost more CPU than the database did. A
    statement the server cannot run is None (see ``dialects.Capabilities``).
    """

    table: sa.Table
    # Finding candidates (``candidates``): what blocks a row, without and with the cursor ...
    blocked: sa.ColumnElement[bool]
    blocked_after: sa.ColumnElement[bool]
    every: sa.Select[Any]  # ... eligible=None: every claimable row in key order, from the start
    every_after: sa.Select[Any]  # ... and from a cursor
    # Taking them (``taking``), in the transaction ``relax`` lets commit without waiting for the disk.
    relax: sa.Select[Any] | None
    first: Any
    first_many: Any  # first claims of many items in one statement (caps.first_claims_at_once)
    again: sa.Update
    over: sa.Update
    recorded: sa.Select[Any] | None  # the candidates' records as committed, before writing (caps.reads_records_first)
    one_shot: Precompiled | None  # eligible=None: the whole claim as one statement (caps.one_statement_claims)
    one_shot_after: Precompiled | None  # ... from a cursor
    one_shot_keys: Precompiled | None  # ... of the rows named in ``dbw_keys`` (their keys as text)
    # The same three with each item's attempt count and writer's traceparent, for a worker
    # whose coordinator traces (``taking.one_shot``'s ``traces``); the others never join.
    one_shot_traced: Precompiled | None
    one_shot_after_traced: Precompiled | None
    one_shot_keys_traced: Precompiled | None
    expired: sa.Select[Any]  # keys of WORKING items whose lease expired, through the lease index
    # Fenced writes (``fenced``).
    renew_many: sa.Update  # the leases of many claims in one statement
    holders: sa.Select[Any]  # who holds each of many records
    complete: sa.Update
    step_over: sa.Update


_PREBUILT: dict[tuple[int, int, dialects.Capabilities], Prebuilt] = {}


def prebuilt(table: sa.Table, key: sa.Column[Any], caps: dialects.Capabilities) -> Prebuilt:
    """The claim-path statements of ``table`` over the source key ``key`` (see ``Prebuilt``)."""
    cache_key = (id(table), id(key), caps)
    found = _PREBUILT.get(cache_key)
    if found is not None and found.table is table:
        return found
    b = Blocked.build(table, key, caps)

    # The source's trace table (``workers.beside`` defines it for every worker's source).
    side = traces.side_table(key.table) if caps.one_statement_claims else None

    def once(cursor: bool = False, keyed: bool = False, traced: bool = False) -> Precompiled | None:
        statement = one_shot(table, key, caps, b, cursor=cursor, keyed=keyed,
                             traces=side if traced else None)  # fmt: skip
        return None if statement is None else Precompiled(statement)

    built = Prebuilt(
        table=table,
        blocked=b.blocked,
        blocked_after=b.blocked_after,
        every=every(b, key, caps, cursor=False),
        every_after=every(b, key, caps, cursor=True),
        relax=dialects.relax_statement(caps),
        first=first(table, caps),
        first_many=first_many(table, caps),
        again=again(table, caps),
        over=over(table, caps),
        recorded=recorded(table, caps),
        one_shot=once(),
        one_shot_after=once(cursor=True),
        one_shot_keys=once(keyed=True),
        one_shot_traced=once(traced=True),
        one_shot_after_traced=once(cursor=True, traced=True),
        one_shot_keys_traced=once(keyed=True, traced=True),
        expired=expired(table, caps),
        renew_many=renew_many(table, caps),
        holders=holders(table),
        complete=complete(table, caps),
        step_over=step_over(table),
    )
    _PREBUILT[cache_key] = built
    return built


def of(conn: Connection, table: sa.Table) -> Prebuilt:
    """``prebuilt`` for ``table`` (its source key found through its foreign key) on ``conn``'s server."""
    key = next(iter(table.c.source_id.foreign_keys)).column
    return prebuilt(table, key, dialects.of(conn))


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
    narrowed = narrow(prebuilt(table, key, caps), key, query, swept=after is not None)
    return narrowed if after is None else narrowed.params(dbw_after=after)


def top_key(key: sa.Column[Any]) -> sa.Select[Any]:
    """The source's highest key (where a sweep that found nothing starts next). Locks: none."""
    return sa.select(sa.func.max(key))


def load_source(source: Any) -> sa.Select[Any]:
    """The claimed source row, by its key ``dbw_key``, as the handler receives it.

    Locks: none; it runs in the handler's transaction, whose own writes lock what they write.
    """
    key = sa.inspect(source).primary_key[0]
    return sa.select(source).where(key == sa.bindparam("dbw_key", type_=key.type))
