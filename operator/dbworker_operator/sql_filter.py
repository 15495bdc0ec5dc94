"""A KEDA database trigger's ``filter``: accepted only when a SQL parser reads it as one boolean
condition on the source table's own columns.

builders/autoscaling.py writes the filter into the query KEDA runs with the Worker's database
credentials, so a deny-list of characters is not enough (MySQL's ``#`` starts a comment, a
subquery reads other tables, a function can sleep or read files). sqlglot parses it in the
trigger's dialect; what it finds must be a single expression made only of the source table's
columns, literals, comparisons, boolean and arithmetic operators, and a few pure functions,
with no comment anywhere. Backslashes are refused as well: MySQL (unless NO_BACKSLASH_ESCAPES)
reads them as escapes inside strings and PostgreSQL does not, so a string could end where the
parser did not see it end.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

from dbworker_operator import rules

# The trigger's type (rules.SQL_TRIGGER_TYPES) -> sqlglot's dialect.
DIALECTS = {"postgresql": "postgres", "mysql": "mysql"}
EXAMPLE = "ready AND NOT archived"

# Every node a filter may hold. Anything else (a subquery, a statement, a function not listed, a
# parameter, a dollar-quoted or escape string, a table other than the source) is refused.
_ALLOWED: tuple[type, ...] = (
    exp.And, exp.Or, exp.Not, exp.Paren,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.Is, exp.In, exp.Between, exp.Like, exp.ILike,
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null,
    exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod,
    exp.Interval, exp.Var, exp.Cast, exp.DataType,
    exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime,
    exp.Coalesce, exp.Lower, exp.Upper, exp.Length, exp.Abs,
)
# Functions sqlglot does not model in every dialect (MySQL's NOW() among them), read by name: the
# clock only, nothing that waits, reads files or other tables.
_CLOCK_FUNCTIONS = frozenset({"now", "utc_timestamp", "utc_date", "utc_time", "curdate", "curtime",
                              "current_timestamp", "localtimestamp", "statement_timestamp"})
# A condition at the top: a comparison or test, a boolean combination, or a boolean column.
_CONDITIONS: tuple[type, ...] = (exp.Predicate, exp.And, exp.Or, exp.Not, exp.Column, exp.Boolean)


def problem(condition: str, *, kind: str, table: str) -> str | None:
    """Why ``condition`` is not one boolean condition on ``table``'s columns in ``kind``'s SQL
    (postgresql or mysql), or None when it is."""
    if len(condition) > rules.MAX_SQL_FILTER:
        return f"it has {len(condition)} characters; keep it to {rules.MAX_SQL_FILTER}"
    if "\\" in condition:
        return "it holds a backslash, which MySQL and PostgreSQL read differently inside strings"
    dialect = DIALECTS[kind]
    try:
        if any(token.comments for token in sqlglot.tokenize(condition, read=dialect)):
            return "it holds a comment"
        parsed = sqlglot.parse(condition, read=dialect)
    except sqlglot.errors.SqlglotError as exc:
        return f"it does not parse as {kind} SQL ({str(exc).splitlines()[0][:200]})"
    statements = [p for p in parsed if p is not None]
    if len(statements) != 1:
        return "it is not one expression (no ; and no second statement)"
    [expression] = statements
    top = expression.unnest()
    if not isinstance(top, _CONDITIONS):
        return f"it is not a condition (it reads as {type(top).__name__})"
    for node in expression.walk():
        if isinstance(node, exp.Anonymous) and node.name.lower() in _CLOCK_FUNCTIONS and not node.expressions:
            continue
        if not isinstance(node, _ALLOWED):
            return f"it holds {_shown(node)}, which a filter may not use"
        if isinstance(node, exp.Var) and not isinstance(node.parent, exp.Interval):
            return f"it holds the bare word {node.name!r}"
        if isinstance(node, exp.Column):
            if node.table and node.table != table:
                return f"it names table {node.table!r}; use only columns of {table!r}"
            if not re.match(rules.SQL_NAME_PATTERN, node.name):
                return f"it names column {node.name!r}, not a plain column name"
    return None


def _shown(node: exp.Expr) -> str:
    if isinstance(node, exp.Func):
        return f"the function {node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}()"
    if isinstance(node, exp.Query | exp.Subquery):
        return "a subquery"
    return f"a {type(node).__name__}"
