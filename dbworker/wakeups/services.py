"""The wake-up services of one coordinator: chosen by database, started and stopped as a list.

``build`` asks the database what it offers and returns the router with a ``Service`` for
each source of wake-ups that runs beside the claim loops:

- PostgreSQL through psycopg: the listener, on a session of its own (``listen_url``'s
  behind a transaction pooler; a pooler-mode coordinator without one polls);
- MySQL/MariaDB and SQLite: the change table's reader, where the source tables have its
  triggers (``dbworker migrate`` installs them);
- SQLite: the commit watcher, which has the change feed read (or, without it, every loop
  look) when another connection committed;
- periodic workers: the tick inserter, which wakes a schedule's loop at each due time.

Items that end here wake the loops that wait for them through the router, with no thread
of their own. Every service wakes loops through the router's callbacks (``notified``: a
payload naming rows, a table or an ended item; ``committed``: anything may have changed;
``due``: a worker's due time came); the listener or the change feed also tells other
coordinators of ended items (``announce``). Polling stays the floor everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import NullPool

from dbworker import redact
from dbworker.observe import Observer
from dbworker.schedules import inserter
from dbworker.sql import changes as sql_changes
from dbworker.sql import dialects, notify, poolers, upgrade
from dbworker.wakeups import changes, postgres, sqlite
from dbworker.wakeups.router import Router, Wakeable
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")


class Service(Protocol):
    """One source of wake-ups on a thread of its own."""

    def start(self) -> None:
        """Start its thread (the loops it wakes run already)."""

    def drain(self) -> None:
        """The coordinator stopped claiming: stop making work a draining fleet would leave undone."""

    def stop(self, deadline: float) -> None:
        """End its thread; wait for it until ``deadline`` (``time.monotonic()``) where what it
        does must not outlive the coordinator."""


@dataclass(frozen=True)
class Wakeups:
    """What ``build`` chose: the router, the services, and the sources they feed."""

    router: Router
    services: tuple[Service, ...]
    fed: frozenset[str]  # source tables with the wake-up triggers and a reader for them
    announce: Callable[[str, str | None], None] | None  # tells other coordinators an item ended

    def attach(self, loops: Sequence[Wakeable]) -> None:
        """The loops to wake (before ``start``)."""
        self.router.attach(loops, announce=self.announce)

    def start(self) -> None:
        for service in self.services:
            service.start()

    def drain(self) -> None:
        for service in self.services:
            service.drain()

    def stop(self, deadline: float) -> None:
        for service in self.services:
            service.stop(deadline)


def build(
    engine: Engine,
    registered: Iterable[RegisteredWorker],
    selected: Sequence[RegisteredWorker],
    *,
    listen_url: URL | None,
    transaction_pooler: bool,
    secrets: tuple[str, ...],
    observer: Observer | None = None,
) -> Wakeups:
    """The wake-ups of a coordinator running ``selected`` of its ``registered`` workers.

    Every registered worker counts for the router, started here or not: other pods start
    the others, and their items' ends are announced. The change feed has read where the
    change table stands before this returns, so what the loops' first claims miss is in it.
    """
    router = Router(registered, observer=observer, dialect=engine.dialect)  # it counts what it ignores
    caps = dialects.capabilities(engine.dialect)
    listens = dialects.can_listen(engine.dialect) and (listen_url is not None or not transaction_pooler)
    if caps.notifies and transaction_pooler and not listens:
        log.info(poolers.POLL_ONLY)
    fed = _fed(engine, [w.key.table for w in selected], listens=listens, secrets=secrets)
    listener = feed = watcher = ticker = None
    if listens:
        # Behind a pooler: a session of its own on the server itself, opened and closed by the listener.
        on = engine if listen_url is None else sa.create_engine(listen_url, poolclass=NullPool)
        listener = postgres.Listener(on, router.notified, secrets=secrets, on_resumed=router.committed)
    elif not caps.notifies and fed:
        feed = changes.ChangeFeed(engine, router.notified, router.committed, secrets=secrets)
        feed.prime()
    elif not caps.notifies:
        log.info("dbworker: no wake-up triggers on the source tables (`dbworker migrate` installs "
                 "them): workers poll")  # fmt: skip
    if caps.watches_commits:
        # A commit seen: the change table names what changed (every write to a source,
        # give-backs, resets, ended items others wait for). Without it every loop looks.
        on_change = router.committed if feed is None else feed.read_now
        watcher = sqlite.DataVersionWatcher(engine, on_change, secrets=secrets)
    scheduled = [(w.schedule, w.table) for w in selected if w.schedule is not None]
    if scheduled:
        ticker = inserter.TickInserter(engine, scheduled, wake=router.due, secrets=secrets)
    transport = listener or feed
    return Wakeups(
        router=router,
        services=tuple(s for s in (listener, watcher, feed, ticker) if s is not None),
        fed=fed,
        announce=None if transport is None else transport.announce_done,
    )


def _fed(engine: Engine, sources: list[sa.Table], *, listens: bool, secrets: tuple[str, ...]) -> frozenset[str]:
    """Names of the source tables with the wake-up triggers (and a reader for them)."""
    try:
        with dialects.connect(engine) as conn:
            if listens:
                return frozenset(t.name for t in sources if notify.installed(conn, t))
            if dialects.of(conn).notifies or upgrade.missing(engine, [sql_changes.TABLE]):
                return frozenset()
            return frozenset(t.name for t in sources if sql_changes.has_triggers(conn, t))
    except Exception as exc:  # noqa: BLE001 - polling covers it
        log.info("dbworker: could not look for the wake-up triggers: %s", redact.describe(exc, secrets))
        return frozenset()
