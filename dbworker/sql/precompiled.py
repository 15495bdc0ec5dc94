"""Running a prebuilt statement as compiled driver SQL: the claim path's hot statements.

For a statement whose shape never changes, SQLAlchemy's per-execution work (the cache key
of the whole statement tree, the compiled-cache lookup, parameter and result processing)
cost more client CPU than the database spends on it. ``Precompiled`` compiles it once per
dialect and runs the SQL through ``exec_driver_sql``, so errors are wrapped and dead
connections invalidated as usual.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection


class Precompiled:
    """One prebuilt statement, compiled once per dialect to the driver's SQL.

    When a bound value or a result column needs the type's processing (a key stored through
    a TypeDecorator, DateTime on SQLite, ...), it runs the statement the normal way instead.
    """

    def __init__(self, statement: Any, *, literal: bool = False) -> None:
        """``literal``: render every bound value into the SQL, for a statement whose values
        are fixed when it is built. PostgreSQL plans a prepared statement without parameters
        once; with parameters it may plan each run again for their values (custom plans)."""
        self.statement = statement
        self._literal = literal
        self._dialect: Any = None
        self._compiled: Any = None
        self._sql = ""
        self._fast = False

    def prepare(self, dialect: Any) -> None:
        """Compile for ``dialect`` now (else on first use)."""
        compiled = self.statement.compile(dialect=dialect, compile_kwargs={"literal_binds": self._literal})
        types = [] if self._literal else [bind.type for bind in compiled.binds.values()]
        # What the statement returns: a SELECT's columns, an INSERT's or UPDATE's RETURNING.
        results = [column.type for column in getattr(self.statement, "exported_columns", ())]
        # An expanding IN list (POSTCOMPILE) is rendered per execution: only SQLAlchemy can run it.
        expanded = bool(compiled.literal_execute_params or compiled.post_compile_params)
        self._fast = not expanded and all(t.dialect_impl(dialect).bind_processor(dialect) is None for t in types) and all(
            t.dialect_impl(dialect).result_processor(dialect, None) is None for t in results
        )
        self._dialect, self._compiled, self._sql = dialect, compiled, str(compiled)

    def execute(self, conn: Connection, values: dict[str, Any]) -> sa.CursorResult[Any]:
        """Run the statement on ``conn`` with ``values`` (compiling first for a new dialect)."""
        if conn.dialect is not self._dialect:
            self.prepare(conn.dialect)
        if not self._fast:
            return conn.execute(self.statement, values)
        if self._literal:
            return conn.exec_driver_sql(self._sql)
        compiled = self._compiled
        params: Any = compiled.construct_params(values)
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup)
        return conn.exec_driver_sql(self._sql, params)
