"""Stored times that Python cannot hold, read without failing.

PostgreSQL's ``timestamp`` reaches the year 294276 and SQLite stores any text, while Python's
``datetime`` stops at 9999: a ``not_before`` stored before waits had a bound (an
``Unfinished(after=1e13)`` of an earlier release) or written by hand would make every read of
its row raise (``state()``, the console, the loop's lookup of waiting items, every second).
Reads of the work table's times go through ``readable``: later than ``LATEST`` reads as
``LATEST``. MySQL/MariaDB's ``DATETIME`` stops at 9999 itself.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
_LATEST_TEXT = LATEST.isoformat(sep=" ")  # SQLite's stored form


def readable(column: sa.ColumnElement[Any], dialect: Dialect) -> sa.ColumnElement[Any]:
    """``column`` (a naive DateTime), capped at ``LATEST``, labelled with its own name."""
    name = getattr(column, "name", None)
    # CASE, not LEAST: a NULL stays NULL (PostgreSQL's LEAST skips NULLs).
    if dialect.name == "postgresql":
        latest = sa.literal(LATEST, sa.DateTime())
        expr: sa.ColumnElement[Any] = sa.case((column > latest, latest), else_=column)
    elif dialect.name == "sqlite":
        # Text: a year of other than four digits (SQLite's own text form) is past 9999.
        expr = sa.case((sa.func.substr(column, 5, 1) != "-", sa.literal(_LATEST_TEXT)), else_=column)
    else:
        return column
    expr = sa.type_coerce(expr, column.type)
    return expr.label(name) if name else expr


def readable_columns(table: sa.Table, dialect: Dialect) -> list[sa.ColumnElement[Any]]:
    """Every column of ``table``, its DateTime ones through ``readable``."""
    return [readable(c, dialect) if isinstance(c.type, sa.DateTime) else c for c in table.c]


def within_reach(column: sa.ColumnElement[Any], dialect: Dialect) -> sa.ColumnElement[bool]:
    """``column`` holds a time Python can read (on SQLite: stored with a four-digit year)."""
    if dialect.name == "postgresql":
        return column <= sa.literal(LATEST, sa.DateTime())
    if dialect.name == "sqlite":
        return sa.func.substr(column, 5, 1) == "-"
    return sa.true()
