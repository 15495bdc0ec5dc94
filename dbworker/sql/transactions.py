"""The one commit-or-roll-back helper for dbworker's own short transactions.

Callers (``claims``, ``attempts``) run their statements inside ``committed(conn)``; which
statements, and the locks they take, are theirs and ``statements``'. And ``EndWatch``, which
sees a statement end the transaction it ran in (a handler's own ``COMMIT``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection


@contextlib.contextmanager
def committed(conn: Connection) -> Iterator[None]:
    """Commit what the block ran on ``conn``; roll it back if the block or the commit raises.

    Anything raised counts (``BaseException``): callers go on using ``conn`` (a claim loop
    runs several rounds on one), so no half-done transaction, or its row locks, may outlive
    the block.
    """
    try:
        yield
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def in_transaction(dbapi_conn: Any) -> bool | None:
    """Whether the driver connection is inside a transaction that has written or begun, read
    from what the driver already knows (no round trip); None for a driver that does not say.

    psycopg: the server's transaction status; PyMySQL: the in-transaction flag of the last
    OK packet (set by writes); sqlite3: ``in_transaction`` (set by writes).
    """
    info = getattr(dbapi_conn, "info", None)
    status = getattr(info, "transaction_status", None)
    if status is not None:
        return int(status) != 0  # psycopg's IDLE
    flags = getattr(dbapi_conn, "server_status", None)
    if isinstance(flags, int):
        return bool(flags & 1)  # SERVER_STATUS_IN_TRANS
    found = getattr(dbapi_conn, "in_transaction", None)
    return found if isinstance(found, bool) else None


class EndWatch:
    """Sees a statement end the transaction it ran in (a handler's own ``COMMIT``, an implicit
    commit of MySQL DDL): the connection was in a transaction before it and is not after.

    Engine events, on the handler session's connections only (``start`` and ``follow``: a
    session rolled back begins again on another); on only while a handler runs. ``ended``:
    the first such statement's text.
    """

    def __init__(self) -> None:
        self.watching = False
        self.ended: str | None = None
        # Ids of the watched driver connections, and whether each was in a transaction
        # before its current statement.
        self._conns: dict[int, bool | None] = {}

    def attach(self, engine: Any) -> None:
        event.listen(engine, "before_cursor_execute", self._before_statement)
        event.listen(engine, "after_cursor_execute", self._after_statement)

    def detach(self, engine: Any) -> None:
        event.remove(engine, "before_cursor_execute", self._before_statement)
        event.remove(engine, "after_cursor_execute", self._after_statement)

    def start(self, conn: Connection) -> None:
        """Watch ``conn`` (the handler session's), and those ``follow`` adds, until ``stop``."""
        self._conns = {id(conn.connection.dbapi_connection): None}
        self.watching, self.ended = True, None

    def follow(self, conn: Connection) -> None:
        """The handler's session began again on ``conn`` (after a rollback)."""
        if self.watching:
            self._conns.setdefault(id(conn.connection.dbapi_connection), None)

    def stop(self) -> str | None:
        self.watching = False
        return self.ended

    def _before_statement(self, conn: Connection, *args: Any) -> None:
        driver = conn.connection.dbapi_connection
        if self.watching and id(driver) in self._conns:
            self._conns[id(driver)] = in_transaction(driver)

    def _after_statement(self, conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
        driver = conn.connection.dbapi_connection
        if not self.watching or not self._conns.get(id(driver)) or self.ended is not None:
            return
        if in_transaction(driver) is False:
            self.ended = " ".join(statement.split())[:80]
