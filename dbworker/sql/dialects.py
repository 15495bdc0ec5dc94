"""What differs between database servers, answered once: locking, the server clock, errors.

Capabilities (SKIP LOCKED by version, FOR UPDATE OF), "now" on the server's own clock, an
insert ignoring a duplicate key, transient errors, and the server-level statements (a ping,
SQLite's PRAGMAs). The statements built from these answers are ``statements``'.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Dialect, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

# SQLite stores DateTime as text in this layout (SQLAlchemy's own), so server-side values
# compare and parse like the ones SQLAlchemy writes: %f is "SS.SSS", the zeros make microseconds.
_SQLITE_DATETIME = "%Y-%m-%d %H:%M:%f000"

# MySQL error codes that a retry can cure: lock wait timeout, deadlock, gone away, lost, can't connect.
_MYSQL_TRANSIENT = {1040, 1205, 1213, 2003, 2006, 2013, 2055, 4031}


@dataclass(frozen=True)
class Capabilities:
    """One server's answers to the questions the claim path asks."""

    name: str  # "sqlite", "postgresql", "mysql" or "mariadb"
    skip_locked: bool  # SELECT ... FOR UPDATE SKIP LOCKED decides claims
    lock_of: bool  # FOR UPDATE OF <table> is accepted
    gen_random_uuid: bool = False  # PostgreSQL 13+: tokens can be made by the server

    # --- what the claim path and the wake-ups do on this server, by name -------------------
    @property
    def embedded(self) -> bool:
        """The database is a file the process opens itself (SQLite): its own catalog
        (``sqlite_master``) and trigger syntax, and no server to notify or wait on."""
        return self.name == "sqlite"

    @property
    def notifies(self) -> bool:
        """LISTEN/NOTIFY carry wake-ups (PostgreSQL); elsewhere the change table does."""
        return self.name == "postgresql"

    @property
    def watches_commits(self) -> bool:
        """Another connection's commit is seen on a file's ``PRAGMA data_version`` (SQLite):
        a watcher thread wakes the loops, and the file runs in WAL mode."""
        return self.embedded

    @property
    def keys_as_text(self) -> bool:
        """Rows named by wake-ups are claimed by their keys' text form, bound as one array
        cast to the key's type (PostgreSQL); elsewhere by key values in an IN list."""
        return self.name == "postgresql"

    @property
    def first_claims_at_once(self) -> bool:
        """First claims of many items are one INSERT over unnested arrays, returning the keys
        inserted (PostgreSQL)."""
        return self.name == "postgresql"

    @property
    def one_statement_claims(self) -> bool:
        """A whole claim round is one autocommitted statement (PostgreSQL 13+: its tokens are
        made by the server)."""
        return self.name == "postgresql" and self.gen_random_uuid

    @property
    def reads_records_first(self) -> bool:
        """A claim reads its candidates' records (without locks) and writes only what can win
        (MySQL/MariaDB). There an UPDATE or INSERT IGNORE of a record another transaction
        holds waits for it even when the committed row cannot match; PostgreSQL checks its
        snapshot first. A claim holds its candidates' source rows, and a handler recording
        its outcome (the history row's foreign key check) waits on the item's source row: a
        claim that raced the item's claim and then waited on that handler's record would be
        a deadlock."""
        return self.name in ("mysql", "mariadb")

    @property
    def recorded_writes(self) -> bool:
        """A fenced UPDATE's RETURNING can feed an INSERT in one statement (a data-modifying
        CTE: PostgreSQL), so a handler's outcome and its history row are one round trip."""
        return self.name == "postgresql"

    @property
    def plans_fixed_statements_once(self) -> bool:
        """A statement run often is best sent with its fixed values in its text (PostgreSQL):
        a prepared statement without parameters is planned once, one with parameters may be
        planned again at each run for their values (custom plans)."""
        return self.name == "postgresql"

    def now(self) -> ColumnElement[dt.datetime]:
        """The server's current time as naive UTC."""
        return self._shift(None)

    def now_plus(self, seconds: float) -> ColumnElement[dt.datetime]:
        """The server's current time plus ``seconds``, as naive UTC."""
        return self._shift(sa.literal(self.seconds_value(seconds)))

    def now_plus_seconds(self, seconds: ColumnElement[Any]) -> ColumnElement[dt.datetime]:
        """The server's current time plus ``seconds``, an expression (a column of a statement's rows)."""
        return self._shift(seconds)

    def now_plus_param(self, name: str) -> ColumnElement[dt.datetime]:
        """The server's current time plus a bound parameter ``name`` (see ``seconds_value``)."""
        kind: Any = sa.Float() if self.name == "postgresql" else (
            sa.Integer() if self.name in ("mysql", "mariadb") else sa.String()
        )
        return self._shift(sa.bindparam(name, type_=kind))

    def seconds_value(self, seconds: float) -> Any:
        """The value that ``now_plus_param`` binds for ``seconds`` on this server."""
        if self.name == "postgresql":
            return float(seconds)
        if self.name in ("mysql", "mariadb"):
            return int(seconds * 1_000_000)
        return f"{float(seconds):+.6f} seconds"

    def _shift(self, offset: Any) -> ColumnElement[dt.datetime]:
        if self.name == "postgresql":
            expr: ColumnElement[Any] = sa.func.timezone("UTC", sa.func.statement_timestamp())
            if offset is not None:
                expr = expr + sa.func.make_interval(0, 0, 0, 0, 0, 0, offset)
        elif self.name in ("mysql", "mariadb"):
            expr = sa.func.utc_timestamp(6)
            if offset is not None:
                expr = sa.func.timestampadd(sa.literal_column("MICROSECOND"), offset, expr)
        else:
            expr = sa.func.strftime(_SQLITE_DATETIME, "now", offset if offset is not None else "+0 seconds")
        return sa.type_coerce(expr, sa.DateTime())

    def insert_ignoring_duplicate(self, table: sa.Table, key: str, *more: str) -> Any:
        """An INSERT into ``table`` that does nothing when ``key`` (with ``more``: that
        unique combination of columns) already exists.

        Whether it inserted is told by ``inserted(result)``.
        """
        if self.name == "postgresql":
            # psycopg reports no row count for it (SQLAlchemy adds RETURNING): ask for the key.
            insert = postgresql.insert(table).on_conflict_do_nothing(index_elements=[key, *more])
            return insert.returning(table.c[key])
        if self.name == "sqlite":
            return sqlite.insert(table).on_conflict_do_nothing(index_elements=[key, *more])
        return mysql.insert(table).prefix_with("IGNORE")


def inserted(result: Any) -> bool:
    """Whether an ``insert_ignoring_duplicate`` statement inserted its row."""
    if result.returns_rows:
        return result.first() is not None
    return bool(result.rowcount == 1)


def update_by_key(table: sa.Table) -> sa.Update:
    """An UPDATE of ``table``'s rows that its WHERE names by primary key (work records by
    ``source_id``), told on MySQL/MariaDB to find them through that key.

    Their optimizer may otherwise take the ``execution_status`` index the WHERE also names
    (on a few rows the two tie), and a range of an index locks its next entry too at
    REPEATABLE READ, where a handler's transaction runs: every claim writing a WORKING record
    then waits for that handler's commit, and deadlocks with it when the claim holds the
    source row the handler's history insert checks.
    """
    update = sa.update(table)
    for name in ("mysql", "mariadb"):
        update = update.with_hint("FORCE INDEX (PRIMARY)", dialect_name=name)
    return update


def capabilities(dialect: Dialect) -> Capabilities:
    """The capabilities of the server behind ``dialect`` (it must have connected once)."""
    version = tuple(dialect.server_version_info or ())
    if dialect.name == "postgresql":
        return Capabilities(
            "postgresql", skip_locked=version >= (9, 5), lock_of=True, gen_random_uuid=version >= (13,)
        )
    if dialect.name in ("mysql", "mariadb"):
        if getattr(dialect, "is_mariadb", False):
            return Capabilities("mariadb", skip_locked=version >= (10, 6), lock_of=False)
        return Capabilities("mysql", skip_locked=version >= (8, 0, 1), lock_of=version >= (8, 0, 1))
    return Capabilities(dialect.name, skip_locked=False, lock_of=False)


class _ServerNow(FunctionElement[dt.datetime]):
    """What ``server_now()`` returns: compiled for each server as ``Capabilities.now()``."""

    type = sa.DateTime()
    inherit_cache = True
    name = "dbworker_server_now"


@compiles(_ServerNow)
def _compile_server_now(element: Any, compiler: Any, **kw: Any) -> str:
    caps = Capabilities(compiler.dialect.name, skip_locked=False, lock_of=False)
    return str(compiler.process(caps.now(), **kw))


def server_now() -> ColumnElement[dt.datetime]:
    """The server's current time as naive UTC, in a query built before its server is known
    (an application's eligible query, narrowed to due rows).
    """
    return _ServerNow()


def can_listen(dialect: Dialect) -> bool:
    """Whether a session of ``dialect`` can LISTEN and wait for notifications: PostgreSQL
    through psycopg (``wakeups.postgres`` uses its ``notifies(timeout=)``)."""
    return dialect.name == "postgresql" and dialect.driver == "psycopg"


def of(conn: Connection) -> Capabilities:
    """The capabilities of ``conn``'s server."""
    return capabilities(conn.dialect)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` says the database is unavailable or busy, not that a statement is wrong.

    Connection loss, server shutdown, deadlocks, serialization failures, lock timeouts,
    SQLite's "database is locked" and a wait for a connection of a full pool that ran out
    (SQLAlchemy's ``TimeoutError``) qualify; a retry later can succeed.
    """
    if isinstance(exc, sa.exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        sqlstate = getattr(orig, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in ("08", "40", "53", "57", "55"):
            return True
        args = getattr(orig, "args", ())
        if args and isinstance(args[0], int) and args[0] in _MYSQL_TRANSIENT:
            return True
        text = str(orig).lower()
        if "database is locked" in text or "database table is locked" in text or "busy" in text:
            return True
        return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError)
    return isinstance(exc, sa.exc.DisconnectionError | sa.exc.TimeoutError | ConnectionError | TimeoutError)


def relax_statement(caps: Capabilities) -> sa.Select[Any] | None:
    """A statement that lets its transaction's commit skip waiting for the disk (PostgreSQL).

    Safe for dbworker's own bookkeeping (claims, renewals, give-backs): WAL is flushed in
    order, so a handler's durable commit also makes durable every claim before it; a claim
    lost in a server crash is only an item that will be claimed again. None elsewhere.
    """
    if caps.name == "postgresql":
        return sa.select(sa.func.set_config("synchronous_commit", "off", sa.true()))
    return None


def connect(engine: Engine) -> Connection:
    """A connection for dbworker's own short transactions.

    On MySQL/MariaDB they run READ COMMITTED: REPEATABLE READ's gap locks on the work table
    would make concurrent claimers block and deadlock each other.
    """
    conn = engine.connect()
    if conn.dialect.name in ("mysql", "mariadb"):
        conn = conn.execution_options(isolation_level="READ COMMITTED")
    return conn


def connect_reads(engine: Engine) -> Connection:
    """A connection for dbworker's own reads of a few rows, which need no transaction.

    On PostgreSQL it runs in autocommit: one round trip per statement, with no BEGIN before
    and no ROLLBACK when it goes back to the pool (psycopg switches autocommit on the client,
    and a transaction pooler sees each statement as its own transaction). What an idle pod
    reads every second costs a third of the round trips. Elsewhere it is ``connect``'s:
    switching a MySQL/MariaDB connection's autocommit is a round trip each way, and SQLite's
    reads take no round trip.
    """
    if engine.dialect.name == "postgresql":
        return engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    return connect(engine)


def ping(conn: Connection) -> None:
    """One round trip (``SELECT 1``); raises what the driver raises when the server is gone."""
    conn.execute(sa.select(sa.literal(1)))


def sqlite_wal(conn: Connection) -> None:
    """Switch the SQLite file to WAL, so readers never wait for a writer; the file keeps it."""
    conn.exec_driver_sql("PRAGMA journal_mode=WAL")


def sqlite_data_version(driver_conn: Any) -> Any:
    """SQLite's ``PRAGMA data_version``, read on a DBAPI (``sqlite3``) connection.

    It changes whenever another connection committed to the file since this one last read it.
    """
    return driver_conn.execute("PRAGMA data_version").fetchone()[0]


def name_of(url: URL, dialect: Dialect | None) -> str:
    """"sqlite", "postgresql", "mysql" or "mariadb" for ``url`` (MySQL and MariaDB told apart
    by the connected ``dialect`` once it has met the server, else by the URL's driver name)."""
    if dialect is not None and dialect.server_version_info is not None:
        return capabilities(dialect).name
    return "mariadb" if url.drivername.startswith("mariadb") else url.get_backend_name()
