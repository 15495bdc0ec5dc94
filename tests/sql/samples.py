"""The sample work table, the dialects and the list of claim-path statements compiled to ``*.sql``.

The sample is a worker ``items`` over a source ``items`` with an integer key: with
``eligible=None``, and with one filtered, ordered eligible query. Its own MetaData keeps the
files independent of the test applications.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import limits
from dbworker.sql import attempts, dialects, history, slots, statements, tables, taking, turns

DIRECTORY = Path(__file__).parent
REGENERATE = ".venv/bin/python -m tests.sql.write"


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(primary_key=True)
    ready: Mapped[bool] = mapped_column(default=True)
    priority: Mapped[int] = mapped_column(default=0)


WORK = tables.work_table("items", Item)
HISTORY = history.history_table(WORK)
KEY = tables.source_key(Item)
# A limited worker's round (``sql.limited``): at most 2 running per priority.
SLOTS = slots.slots_table(WORK)
LIMITS = limits.check_limits([limits.Limit(key=Item.priority, concurrency=2)], Item.__table__)


def ready_by_priority() -> sa.Select[Any]:
    """The sample eligible query: filtered, with an order of its own."""
    return sa.select(Item).where(Item.ready).order_by(Item.priority.desc(), Item.id)


# The oldest server on which every capability dbworker uses is on (dialects.capabilities):
# SKIP LOCKED from MySQL 8.0.1 and MariaDB 10.6, server-made tokens from PostgreSQL 13.
# SQLite's capabilities do not depend on its version. MariaDB is told apart on connecting.
SERVERS: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "sqlite": ("sqlite+pysqlite://", None),
    "postgresql": ("postgresql+psycopg://", (13, 0)),
    "mysql": ("mysql+pymysql://", (8, 0, 1)),
    "mariadb": ("mysql+pymysql://", (10, 6, 0)),
}


def dialect(name: str, version: tuple[int, ...] | None = None) -> Dialect:
    """The dialect an engine for ``name`` has once connected to ``version`` (default: ``SERVERS``'); no connection is made."""
    url, default = SERVERS[name]
    version = version or default
    d: Any = sa.create_engine(url).dialect  # with the driver's own parameter style
    if version is None:
        return d  # type: ignore[no-any-return]
    d.server_version_info = version
    if name in ("mysql", "mariadb"):
        d.is_mariadb = name == "mariadb"
        # What SQLAlchemy decides from the version on connecting (FOR UPDATE OF from MySQL
        # 8.0, among others); these use no connection.
        if d.is_mariadb:
            d._initialize_mariadb(None)
        else:
            d._initialize_mysql(None)
    return d  # type: ignore[no-any-return]


def _one_shot(run: statements.Precompiled | None) -> Any:
    return None if run is None else run.statement


# Every claim-path statement, by file name: what ``claims`` runs, built by ``statements``.
# None: the statement does not exist on that server.
STATEMENTS: dict[str, Callable[[statements.Prebuilt, dialects.Capabilities], Any]] = {
    "relax": lambda st, caps: st.relax,
    "blocked": lambda st, caps: st.blocked,
    "blocked_after": lambda st, caps: st.blocked_after,
    "every": lambda st, caps: st.every,
    "every_after": lambda st, caps: st.every_after,
    "eligible": lambda st, caps: statements.eligible_candidates(
        st, KEY, statements.eligible_query(ready_by_priority, KEY), caps, cursor=False
    ),
    "eligible_low": lambda st, caps: statements.eligible_candidates(
        st, KEY, statements.eligible_query(ready_by_priority, KEY), caps, cursor=False, low=True
    ),
    "first_candidate": lambda st, caps: statements.first_candidate(
        st, KEY, statements.eligible_query(ready_by_priority, KEY), caps, bound=True
    ),
    "named": lambda st, caps: statements.named_candidates(st, KEY, statements.eligible_query(None, KEY), caps, [1, 2]),
    "named_eligible": lambda st, caps: statements.named_candidates(
        st, KEY, statements.eligible_query(ready_by_priority, KEY), caps, [1, 2]
    ),
    "claimable": lambda st, caps: statements.claimable(WORK, KEY, statements.eligible_query(None, KEY), caps),
    "first": lambda st, caps: st.first,
    "first_many": lambda st, caps: st.first_many,
    "one_shot": lambda st, caps: _one_shot(st.one_shot),
    "one_shot_after": lambda st, caps: _one_shot(st.one_shot_after),
    "one_shot_keys": lambda st, caps: _one_shot(st.one_shot_keys),
    # The same with each claim's attempt count and writer's traceparent (tracing on).
    "one_shot_traced": lambda st, caps: _one_shot(st.one_shot_traced),
    "one_shot_after_traced": lambda st, caps: _one_shot(st.one_shot_after_traced),
    "one_shot_keys_traced": lambda st, caps: _one_shot(st.one_shot_keys_traced),
    "again": lambda st, caps: st.again,
    "over": lambda st, caps: st.over,
    "recorded": lambda st, caps: st.recorded,
    "renew_many": lambda st, caps: st.renew_many,
    "holders": lambda st, caps: st.holders,
    "complete": lambda st, caps: st.complete,
    "step_over": lambda st, caps: st.step_over,
    # A handler's outcome with its history row, in one statement where the server allows.
    "complete_recorded": lambda st, caps: history.recorded(st.complete, HISTORY) if caps.recorded_writes else None,
    "step_over_recorded": lambda st, caps: history.recorded(st.step_over, HISTORY) if caps.recorded_writes else None,
    "expired": lambda st, caps: st.expired,
    "top_key": lambda st, caps: statements.top_key(KEY),
    # A limited round: its candidates from the worker's mark (with their keys' slot rows
    # where the server can), then its slot writes, claims and mark in one statement.
    "limited_read": lambda st, caps: turns.read_statement(
        st, KEY, WORK, statements.eligible_query(None, KEY), LIMITS, caps, from_mark=True, keys=None,
        rows=turns.prefix_rows(1),
    ),
    "limited_round": lambda st, caps: taking.limited_round(WORK, SLOTS, KEY, caps),
    "load_source": lambda st, caps: statements.load_source(Item),
    # What every idle claim loop reads once a second: its pause and its waiting items (on
    # PostgreSQL sent with these values in its text: ``Precompiled(literal=True)``).
    "lookup": lambda st, caps: attempts.lookup_query(WORK, "items", 64, overdue=60.0, dialect=dialect(caps.name)),
}


def render(statement: Any, d: Dialect, *, title: str) -> str:
    """``statement`` as ``d`` sends it, under a header naming it and its parameters in order."""
    # An IN list of values stays SQLAlchemy's placeholder (POSTCOMPILE), expanded per execution.
    compiled = statement.compile(dialect=d)
    params = compiled.params
    names = list(compiled.positiontup) if compiled.positional else list(params)
    # A bound parameter the caller binds (dbw_*) or one computed per execution (dbw_claimer)
    # by name alone; one with a fixed value, with it.
    shown = [
        name if compiled.binds[name].required or compiled.binds[name].callable else f"{name}={params[name]!r}"
        for name in names
    ]
    # Lines without their trailing spaces, so an editor's clean-up never makes a file differ.
    sql = "\n".join(line.rstrip() for line in str(compiled).strip().splitlines())
    return f"-- {title}\n-- parameters: {', '.join(shown) or 'none'}\n{sql}\n"


def compiled(name: str, d: Dialect | None = None) -> dict[str, str]:
    """File name -> content of every statement that exists on ``name`` (compiled for ``d``, default ``dialect(name)``)."""
    d = d or dialect(name)
    caps = dialects.capabilities(d)
    st = statements.prebuilt(WORK, KEY, caps)
    driver = d.driver
    found: dict[str, str] = {}
    for statement, build in STATEMENTS.items():
        built = build(st, caps)
        if built is not None:
            title = f"{statement} on {name} ({driver}, {_capabilities(caps)})"
            found[f"{statement}.{name}.sql"] = render(built, d, title=title)
    return found


def _capabilities(caps: dialects.Capabilities) -> str:
    on = [field for field in ("skip_locked", "lock_of", "gen_random_uuid") if getattr(caps, field)]
    return "capabilities: " + (", ".join(on) or "none")


def every_file() -> dict[str, str]:
    """File name -> content, for every dialect."""
    found: dict[str, str] = {}
    for name in SERVERS:
        found.update(compiled(name))
    return found


def committed() -> dict[str, str]:
    """File name -> content of the ``*.sql`` files in this directory."""
    return {path.name: path.read_text() for path in sorted(DIRECTORY.glob("*.sql"))}
