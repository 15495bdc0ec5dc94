"""A primary key typed by a person (the console's URLs, ``dbworker retry``/``cancel``) as a value.

``tables.parse_key`` reads the key's type; this adds what a person's text needs before it
reaches SQL: an integer is written plainly (ASCII digits with an optional ``-``: ``1_0``,
``+1``, `` 1`` or Arabic-Indic digits are refused, never read as another item), and one beyond
what the column can hold on this database is ``OutOfRange`` (no item can have it) instead of a
database error. ``is_text_form`` checks a wake-up's key text the same way before it is named
to a claim.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from dbworker.sql import tables

_PLAIN_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")  # str.isdigit and int() take far more
# MySQL's own integer types by their visit name; the generic ones by class below.
_MYSQL_BITS = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INTEGER": 32, "BIGINT": 64}


class OutOfRange(ValueError):
    """An integer key no row can have: beyond the key column's range on this database."""


def parse(raw: str, source: Any, dialect: Dialect | None) -> Any:
    """``raw`` as a key of ``source`` on ``dialect``: ``ValueError`` naming the expected form,
    ``OutOfRange`` (a ``ValueError``) when no row can have it (no dialect: 64 bits)."""
    column = tables.source_key(source)
    if tables.key_kind(column) is not int:
        return tables.parse_key(raw, source)
    if not _PLAIN_INTEGER.fullmatch(raw):  # the same words as tables.parse_key's
        raise ValueError(f"item ID {raw!r} is not an integer (the primary key of {source.__name__})")
    value = int(raw)
    low, high = integer_range(column, dialect)
    if not low <= value <= high:
        raise OutOfRange(
            f"item ID {raw} is out of range of {source.__name__}'s primary key ({low}..{high}): no item has it"
        )
    return value


def integer_range(column: sa.Column[Any], dialect: Dialect | None) -> tuple[int, int]:
    """The smallest and largest value ``column`` (an integer) holds on ``dialect``."""
    if dialect is None or dialect.name == "sqlite":  # every SQLite integer is 64-bit, whatever the declared type
        return -(2**63), 2**63 - 1
    kind = column.type.dialect_impl(dialect)
    bits = _MYSQL_BITS.get(str(getattr(kind, "__visit_name__", "")).upper(), 64)
    for cls, size in ((sa.SmallInteger, 16), (sa.BigInteger, 64), (sa.Integer, 32)):
        if isinstance(kind, cls):
            bits = min(bits, size)
            break
    if getattr(kind, "unsigned", False):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def is_text_form(text: str, column: sa.Column[Any], dialect: Dialect | None) -> bool | None:
    """Whether ``text`` is a key of ``column`` as dbworker's triggers and notifications write
    it on ``dialect`` (a wake-up's key, from anyone allowed to ``NOTIFY``); None when the
    key's type has no text form checked here (such wake-ups name no row).

    An integer written plainly and within the column's range; a UUID as PostgreSQL writes it
    (lower case, with dashes), elsewhere any form ``uuid.UUID`` reads; any text for a text key.
    """
    kind = tables.key_kind(column)
    if kind is str:
        return True
    if kind is int:
        if not _PLAIN_INTEGER.fullmatch(text):
            return False
        low, high = integer_range(column, dialect)
        return low <= int(text) <= high
    if kind is uuid.UUID:
        value = tables.key_from_text(text, column)
        if value is None:
            return False
        return dialect is None or dialect.name != "postgresql" or str(value) == text
    return None
