"""The parts every claim-path statement shares: status values, bound parameters, conditions.

A work record's statuses as stored, the ``dbw_*`` parameters the statements bind (the item,
the claim's token, a row limit, the claimer), and the conditions several statements test:
the fence (the claim still holds the record), a wait that is over, a lease that is.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dbworker.sql import claimer, dialects, states
from dbworker.sql.states import DONE, UNFINISHED, WORKING

__all__ = ["DONE", "UNFINISHED", "WORKING", "claimed_by", "due", "fenced", "lease_over", "limit", "sid", "token"]


def limit() -> sa.BindParameter[int]:
    """``dbw_limit``: how many rows a statement returns at most."""
    return sa.bindparam("dbw_limit", type_=sa.Integer())


def sid(table: sa.Table) -> sa.BindParameter[Any]:
    """``dbw_sid``: the source key of the one item a statement writes."""
    return sa.bindparam("dbw_sid", type_=table.c.source_id.type)


def token(table: sa.Table) -> sa.BindParameter[Any]:
    """``dbw_token``: a claim's token."""
    return sa.bindparam("dbw_token", type_=table.c.claim_token.type)


def claimed_by(table: sa.Table) -> sa.BindParameter[Any]:
    """``dbw_claimer``: the claiming process's ``host:pid``, filled in at each execution."""
    return sa.bindparam("dbw_claimer", type_=table.c.claimed_by.type, callable_=claimer.identity)


def fenced(table: sa.Table) -> sa.ColumnElement[bool]:
    """The record of ``dbw_sid`` is WORKING under the token ``dbw_token`` (``states.fence``)."""
    return states.fence(table, sid(table), token(table))


def due(table: sa.Table, caps: dialects.Capabilities) -> sa.ColumnElement[bool]:
    """An UNFINISHED record whose wait (if any) is over."""
    w = table.c
    return sa.and_(w.execution_status == UNFINISHED, sa.or_(w.not_before.is_(None), w.not_before <= caps.now()))


def lease_over(table: sa.Table, caps: dialects.Capabilities) -> sa.ColumnElement[bool]:
    """The record's lease expired, or it has none."""
    w = table.c
    return sa.or_(w.lease_expires_at.is_(None), w.lease_expires_at <= caps.now())
