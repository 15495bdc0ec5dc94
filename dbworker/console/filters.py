"""Finding a worker's items by their data: the filter the worker page and the API's items
endpoint take, checked, and turned into SQL conditions.

``parse`` reads the query parameters (``status``, ``since``, ``until``, ``error``,
``col.<column>``, ``col.<column>.gte`` / ``.lte``) into a frozen ``ItemFilter``, or raises
``FilterError`` naming the parameter and the fix, before anything is read. Source columns
offered (``offered``) are those an index of the source table starts with (its primary key
included), of a type compared here, and not named like a secret. ``browse.page`` runs the
conditions; ``queries.items`` ties the two.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from dbworker.sql import keys, tables

STATUSES = ("failed", "working", "unfinished", "finished")
OPERATORS = {"": "equals", "gte": "at least", "lte": "at most"}
MAX_COLUMN_TESTS = 8  # col.* parameters in one filter
MAX_ERROR_CHARS = 200  # the error substring
MAX_TEXT_CHARS = 1_000  # a value for a text column without a declared length
PREFIX = "col."
# Source columns never filtered on: a filter would tell their values one guess at a time.
SECRET_NAME = re.compile(r"pass(word|wd)?|secret|token|api_?key|credential", re.I)
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


class FilterError(ValueError):
    """A parameter that is not a filter this worker can run: ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ColumnTest:
    column: str
    op: str  # "" (equals), "gte", "lte"
    value: Any

    @property
    def parameter(self) -> str:
        return f"{PREFIX}{self.column}" + (f".{self.op}" if self.op else "")


@dataclass(frozen=True)
class ItemFilter:
    """What a page of items is narrowed to; every field empty: all items."""

    status: str | None = None
    since: dt.datetime | None = None  # naive UTC, on the item's last change (``changed``)
    until: dt.datetime | None = None
    error: str | None = None
    columns: tuple[ColumnTest, ...] = ()

    @property
    def empty(self) -> bool:
        return self == ItemFilter()

    def params(self) -> list[tuple[str, str]]:
        """The query parameters that give this filter back (for links: next page, actions)."""
        found: list[tuple[str, str]] = []
        if self.status:
            found.append(("status", self.status))
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                found.append((name, value.isoformat()))
        if self.error:
            found.append(("error", self.error))
        found += [(t.parameter, _text(t.value)) for t in self.columns]
        return found

    def conditions(self, work: sa.Table, source: sa.Table) -> list[sa.ColumnElement[bool]]:
        """The WHERE conditions over the work table and (for ``col.*``) the source table,
        joined on the source's key (``needs_source``)."""
        w = work.c
        found: list[sa.ColumnElement[bool]] = []
        if self.status:
            found.append(w.execution_status == self.status)
        if self.since is not None or self.until is not None:
            found.append(changed(work, self.since, self.until))
        if self.error:
            found.append(w.error.icontains(self.error, autoescape=True))
        for test in self.columns:
            column = source.c[test.column]
            found.append(column >= test.value if test.op == "gte" else column <= test.value if test.op == "lte"
                         else column == test.value)  # fmt: skip
        return found

    @property
    def needs_source(self) -> bool:
        return bool(self.columns)


def changed(work: sa.Table, since: dt.datetime | None, until: dt.datetime | None) -> sa.ColumnElement[bool]:
    """The item's last change (``changed_at``: its latest claim or, later, its end) within
    ``[since, until]`` (either may be None): one range on one indexed column."""
    c = work.c.changed_at
    return sa.and_(*([] if since is None else [c >= since]), *([] if until is None else [c <= until]))


def offered(source: Any) -> list[sa.Column[Any]]:
    """The columns of ``source``'s table a filter may test, in table order: those an index,
    unique constraint or the primary key starts with, of a type ``convert`` reads, and not
    named like a secret."""
    table = tables.source_key(source).table
    leading = {c.name for c in table.primary_key.columns[:1]}
    for index in table.indexes:
        leading |= {c.name for c in list(index.columns)[:1]}
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and constraint.columns:
            leading.add(next(iter(constraint.columns)).name)
    return [c for c in table.columns if c.name in leading and not SECRET_NAME.search(c.name) and _kind(c) is not None]


def parse(params: Iterable[tuple[str, str]], source: Any, dialect: Dialect | None) -> ItemFilter:
    """The filter in ``params`` (query parameters; other names are left alone); ``FilterError``
    naming the first parameter that is wrong."""
    given: dict[str, str] = {}
    for name, value in params:
        if name in given and (name in ("status", "since", "until", "error") or name.startswith(PREFIX)):
            raise FilterError(name, "given twice; give each filter once")
        given[name] = value
    status = given.get("status") or None
    if status is not None and status not in STATUSES:
        raise FilterError("status", f"{status!r} is not one of {', '.join(STATUSES)} (or empty for all)")
    since, until = (_moment(name, given.get(name, "")) for name in ("since", "until"))
    if since is not None and until is not None and since > until:
        raise FilterError("until", f"{until.isoformat()} is before since ({since.isoformat()}): the range is empty")
    error = given.get("error") or None
    if error is not None and len(error) > MAX_ERROR_CHARS:
        raise FilterError("error", f"at most {MAX_ERROR_CHARS} characters of the error text, got {len(error)}")
    columns = _column_tests({k: v for k, v in given.items() if k.startswith(PREFIX) and v != ""}, source, dialect)
    return ItemFilter(status=status, since=since, until=until, error=error, columns=columns)


def _column_tests(given: dict[str, str], source: Any, dialect: Dialect | None) -> tuple[ColumnTest, ...]:
    if len(given) > MAX_COLUMN_TESTS:
        raise FilterError(PREFIX + "*", f"at most {MAX_COLUMN_TESTS} column filters at once, got {len(given)}")
    columns = {c.name: c for c in offered(source)}
    named = ", ".join(columns) or "none"
    tests = []
    for parameter, raw in sorted(given.items()):
        name, _, op = parameter.removeprefix(PREFIX).partition(".")
        if name not in columns:
            raise FilterError(parameter, f"{source.__name__} has no column {name!r} to filter on (offered, the "
                                         f"indexed ones: {named})")  # fmt: skip
        if op not in OPERATORS:
            raise FilterError(parameter, f"unknown comparison {op!r}: use {PREFIX}{name}=, {PREFIX}{name}.gte= "
                                         f"or {PREFIX}{name}.lte=")  # fmt: skip
        tests.append(ColumnTest(name, op, convert(raw, columns[name], dialect, field=parameter)))
    for name in {t.column for t in tests}:
        low = next((t.value for t in tests if t.column == name and t.op == "gte"), None)
        high = next((t.value for t in tests if t.column == name and t.op == "lte"), None)
        if low is not None and high is not None and low > high:
            raise FilterError(f"{PREFIX}{name}.lte", f"{_text(high)} is below {PREFIX}{name}.gte ({_text(low)}): "
                                                     "the range is empty")  # fmt: skip
    return tuple(tests)


def convert(raw: str, column: sa.Column[Any], dialect: Dialect | None, *, field: str) -> Any:
    """``raw`` as a value of ``column``, within what the column holds on ``dialect``;
    ``FilterError`` naming ``field`` and the expected form otherwise."""
    kind = _kind(column)
    if kind is bool:
        if raw.lower() not in _BOOLEANS:
            raise FilterError(field, f"{raw!r} is not a boolean: use true or false")
        return _BOOLEANS[raw.lower()]
    if kind is int:
        if not _INTEGER.fullmatch(raw.strip()):
            raise FilterError(field, f"{raw!r} is not an integer (column {column.name})")
        low, high = keys.integer_range(column, dialect)
        value = int(raw)
        if not low <= value <= high:
            raise FilterError(field, f"{raw} is out of the range of column {column.name} ({low}..{high})")
        return value
    if kind is float or kind is decimal.Decimal:
        try:
            number = decimal.Decimal(raw.strip()) if kind is decimal.Decimal else float(raw)
        except (ValueError, decimal.InvalidOperation):
            raise FilterError(field, f"{raw!r} is not a number (column {column.name})") from None
        if not math.isfinite(number) or abs(float(number)) > 1e300:
            raise FilterError(field, f"{raw!r} is not a finite number within range (column {column.name})")
        return number
    if kind is dt.datetime:
        moment = _moment(field, raw)
        assert moment is not None
        return moment
    if kind is dt.date:
        try:
            return dt.date.fromisoformat(raw.strip())
        except ValueError:
            raise FilterError(field, f"{raw!r} is not a date: use YYYY-MM-DD") from None
    limit = getattr(column.type, "length", None) or MAX_TEXT_CHARS
    if len(raw) > limit:
        raise FilterError(field, f"longer than column {column.name} holds ({limit} characters), got {len(raw)}")
    return raw


def describe(column: sa.Column[Any]) -> str:
    """What a value of ``column`` looks like, for the worker page's form."""
    kind = _kind(column)
    return {bool: "true or false", int: "integer", float: "number", decimal.Decimal: "number",
            dt.datetime: "ISO 8601 time", dt.date: "YYYY-MM-DD"}.get(kind, "text") if kind else "text"  # fmt: skip


def _kind(column: sa.Column[Any]) -> type | None:
    try:
        kind = column.type.python_type
    except NotImplementedError:
        return None
    for known in (bool, int, float, decimal.Decimal, dt.datetime, dt.date, str):
        if issubclass(kind, known):
            return known
    return None


def _moment(field: str, raw: str) -> dt.datetime | None:
    """An ISO 8601 time as naive UTC (a time without an offset is taken as UTC)."""
    if not raw.strip():
        return None
    try:
        value = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise FilterError(field, f"{raw!r} is not an ISO 8601 time: use e.g. 2026-12-02T10:00:00Z") from None
    if value.tzinfo is not None:
        try:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        except OverflowError:
            raise FilterError(field, f"{raw!r} is out of range once converted to UTC") from None
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)
