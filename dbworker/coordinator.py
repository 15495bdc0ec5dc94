"""The ``Coordinator`` facade: settings checks, registration, start/stop, status calls.

It validates everything an application hands it before anything runs, then wires one
``WorkerLoop`` per worker and one ``LeaseKeeper``; the loops own the handler processes.
Status reads and the ``has_execution_status`` expression are thin calls into ``status``.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime as dt
import logging
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from dbworker import logs, redact, settings
from dbworker.child import ChildConfig
from dbworker.contract import Eligible, ExecutionStatus
from dbworker.leases import LeaseKeeper
from dbworker.loop import WorkerLoop
from dbworker.observe import Observer, Observers
from dbworker.retries import Retry
from dbworker.schedules import inserter, policy, ticks
from dbworker.sql import changes as sql_changes
from dbworker.sql import claims, dialects, notify, pauses, poolers, status, sweeps, tables, upgrade
from dbworker.sql.dialects import connect
from dbworker.sql.due import Due, column_of
from dbworker.wakeups import changes, postgres, sqlite
from dbworker.wakeups.router import Router
from dbworker.workers import (
    RegisteredWorker,
    WorkerViews,
    check_concurrency,
    check_handler,
    check_name,
    check_retry,
    check_timeout,
)

log = logging.getLogger("dbworker")

F = TypeVar("F", bound=Callable[..., Any])

STOP_MARGIN_SECONDS = 5.0  # after a stop deadline: time to end processes and give claims back
STOP_SEEN_SECONDS = 5.0  # at most this long stop() waits for loops to end a claim under way

_running: weakref.WeakSet[Coordinator] = weakref.WeakSet()


def _is_memory_sqlite(url: URL) -> bool:
    if url.get_backend_name() != "sqlite":
        return False
    database = url.database or ""
    return database in ("", ":memory:") or "mode=memory" in database or url.query.get("mode") == "memory"


class Coordinator:
    """Claims ready rows and runs registered handlers for them in child processes."""

    def __init__(
        self,
        session_factory: sessionmaker[Session] | Callable[[], Session],
        *,
        database_url: str | URL,
        engine_options: Mapping[str, Any] | None = None,
        lease_seconds: float = 30,
        poll_seconds: float = 0.25,
        max_poll_seconds: float = 10,
        listen_url: str | URL | None = None,
        transaction_pooler: bool = False,
    ) -> None:
        """``transaction_pooler``: ``database_url`` and the session factory's engine reach
        PostgreSQL through a transaction pooler (PgBouncer ``pool_mode = transaction``):
        no server-side prepared statements on any connection dbworker uses or builds, and no
        LISTEN except on ``listen_url``. ``listen_url``: a direct PostgreSQL URL for the
        one connection that LISTENs for wake-ups (its own, not pooled); without it a
        pooler-mode coordinator polls.
        """
        if not callable(session_factory):
            raise ValueError("session_factory must be the application's sessionmaker (a callable returning a Session)")
        try:
            self._url = make_url(database_url)
        except Exception as exc:
            raise ValueError(
                f"database_url is not a database URL ({type(exc).__name__}); use e.g. "
                "'postgresql+psycopg://user@host/db' or 'sqlite:///path/to/file.db'"
            ) from None
        if engine_options is not None and not isinstance(engine_options, Mapping):
            raise ValueError(f"engine_options must be a dict of create_engine() options, got {type(engine_options).__name__}")
        self._session_factory = session_factory
        self._engine_options = dict(engine_options or {})
        self._settings = settings.settings(lease_seconds, poll_seconds, max_poll_seconds)
        self._secrets = redact.url_secrets(self._url)
        self._listen_url: URL | None = None
        self._transaction_pooler = False
        self._set_pooler(transaction_pooler, listen_url)
        self._registry: dict[str, RegisteredWorker] = {}
        self.workers = WorkerViews(self._registry)
        self._observers = Observers()
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._abort = threading.Event()
        self._loops: list[WorkerLoop] = []
        self._keeper: LeaseKeeper | None = None
        self._listener: postgres.Listener | None = None
        self._watcher: sqlite.DataVersionWatcher | None = None
        self._feed: changes.ChangeFeed | None = None
        self._ticker: inserter.TickInserter | None = None
        self._engine: Engine | None = None

    # --- settings ------------------------------------------------------------------------
    @property
    def lease_seconds(self) -> float:
        return self._settings.lease_seconds

    @property
    def poll_seconds(self) -> float:
        return self._settings.poll_seconds

    @property
    def max_poll_seconds(self) -> float:
        return self._settings.max_poll_seconds

    @property
    def secrets(self) -> tuple[str, ...]:
        """What logs and errors must never show: the database URL's password (for ``logs.mask``)."""
        return self._secrets

    @property
    def database_url(self) -> str:
        """The database URL with its password masked (safe to show)."""
        return redact.safe_url(self._url)

    @property
    def dialect_name(self) -> str:
        """"sqlite", "postgresql", "mysql" or "mariadb" (the last two told apart once connected)."""
        if self._engine is not None and self._engine.dialect.server_version_info is not None:
            return dialects.capabilities(self._engine.dialect).name
        name = self._url.get_backend_name()
        return "mariadb" if self._url.drivername.startswith("mariadb") else name

    def configure(
        self,
        *,
        lease_seconds: float | None = None,
        poll_seconds: float | None = None,
        max_poll_seconds: float | None = None,
        listen_url: str | URL | None = None,
        transaction_pooler: bool | None = None,
    ) -> None:
        """Override timing and pooler settings before ``start()`` (same rules as the constructor)."""
        self._check_not_started("configure")
        if listen_url is not None or transaction_pooler is not None:
            self._set_pooler(
                self._transaction_pooler if transaction_pooler is None else transaction_pooler,
                self._listen_url if listen_url is None else listen_url,
            )
        s = self._settings
        self._settings = settings.settings(
            s.lease_seconds if lease_seconds is None else lease_seconds,
            s.poll_seconds if poll_seconds is None else poll_seconds,
            s.max_poll_seconds if max_poll_seconds is None else max_poll_seconds,
        )

    def set_concurrency(self, name: str, concurrency: int) -> None:
        """Override one worker's concurrency before ``start()``."""
        self._check_not_started("set_concurrency")
        worker = self._get(name)
        self._registry[name] = dataclasses.replace(
            worker, concurrency=check_concurrency(concurrency, field=f"concurrency of {name}")
        )

    @property
    def transaction_pooler(self) -> bool:
        return self._transaction_pooler

    @property
    def listen_url(self) -> str | None:
        """The LISTEN connection's URL with its password masked (None: the engine's own)."""
        return None if self._listen_url is None else redact.safe_url(self._listen_url)

    def _set_pooler(self, transaction_pooler: Any, listen_url: str | URL | None) -> None:
        self._transaction_pooler = poolers.check_transaction_pooler(transaction_pooler, self._url)
        self._listen_url = poolers.check_listen_url(listen_url, self._url)
        extra = () if self._listen_url is None else redact.url_secrets(self._listen_url)
        self._secrets = tuple(dict.fromkeys((*redact.url_secrets(self._url), *extra)))

    def add_observer(self, observer: Observer) -> None:
        """Receive the coordinator's events (see ``dbworker.observe``)."""
        self._observers.add(observer)

    # --- registration ----------------------------------------------------------------------
    def transactional_worker(
        self,
        *,
        name: str,
        source: Any,
        eligible: Eligible | None = None,
        concurrency: int = 1,
        retry: Retry | None = None,
        timeout: float | None = None,
        due: Any = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as worker ``name``'s handler; return it unchanged.

        ``retry``: how failed attempts are tried again (None: a failure is final, as in
        SPEC). ``timeout``: seconds a handler may run before its process is ended and the
        attempt fails (None: no limit). ``due``: a nullable naive-UTC DateTime column of the
        source (``due=Post.publish_at``); a row is claimable only once it is set and not
        later than the database's clock, and the coordinator wakes for it on time. Bad
        arguments raise ``ValueError`` naming them.
        """
        self._check_not_started("transactional_worker")
        self._check_new_name(name)
        key = tables.source_key(source)
        if eligible is not None and not callable(eligible):
            raise ValueError(f"eligible must be a zero-argument callable returning a select(), got {eligible!r}")
        found = None if due is None else Due(column_of(tables.source_mapper(source), due), key, eligible)
        return self._register(name, source, found or eligible, concurrency, retry, timeout, due=found)

    def periodic(
        self,
        *,
        name: str,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        timezone: str = "UTC",
        catch_up: int = 1,
        concurrency: int = 1,
        retry: Retry | None = None,
        timeout: float | None = None,
        retention: float | dt.timedelta = policy.DEFAULT_RETENTION,
    ) -> Callable[[F], F]:
        """Register the decorated function as periodic worker ``name``: ``handler(tick, session)``
        runs once per due time of ``cron`` (in ``timezone``) or ``every`` (seconds or a
        ``timedelta``, from the Unix epoch), across every coordinator running it.

        Its source rows are ticks (``dbworker.schedules.ticks.Tick``: ``name``, ``due_at``
        naive UTC), one per due time; status calls take the tick's id. After downtime at most
        ``catch_up`` missed due times run, the most recent ones (0: none). Ended ticks older
        than ``retention`` are removed with their work rows. ``concurrency``, ``retry`` and
        ``timeout`` are ``transactional_worker``'s. Bad arguments raise ``ValueError`` naming them.
        """
        self._check_not_started("periodic")
        self._check_new_name(name)
        if len(name) > ticks.NAME_LENGTH:
            raise ValueError(f"periodic worker name {name!r} is too long: use at most {ticks.NAME_LENGTH} characters")
        timing = policy.schedule(name, cron=cron, every=every, timezone=timezone, catch_up=catch_up,
                                 retention=retention)  # fmt: skip
        return self._register(name, ticks.Tick, ticks.Ticks(name), concurrency, retry, timeout, schedule=timing)

    def _register(
        self,
        name: str,
        source: Any,
        eligible: Eligible | None,
        concurrency: int,
        retry: Retry | None,
        timeout: float | None,
        *,
        due: Due | None = None,
        schedule: policy.Schedule | None = None,
    ) -> Callable[[F], F]:
        """Check the arguments every kind of worker shares; return the decorator that registers."""
        key = tables.source_key(source)
        check_concurrency(concurrency)
        retry = check_retry(retry)
        timeout = check_timeout(timeout)
        table = tables.work_table(name, source)

        def register(handler: F) -> F:
            check_handler(name, handler)
            if name in self._registry:
                raise ValueError(f"worker name {name!r} is already registered on this coordinator")
            self._check_not_started("transactional_worker" if schedule is None else "periodic")
            self._registry[name] = RegisteredWorker(
                name=name, source=source, handler=handler, eligible=eligible,
                concurrency=concurrency, table=table, key=key, retry=retry, timeout=timeout,
                due=due, schedule=schedule,
            )
            return handler

        return register

    def _check_new_name(self, name: str) -> None:
        check_name(name)
        if name in self._registry:
            raise ValueError(f"worker name {name!r} is already registered on this coordinator")

    # --- status ------------------------------------------------------------------------------
    def execution_status(self, session: Session, *, worker: str, source_id: Any) -> ExecutionStatus | None:
        """The recorded status of ``source_id`` for ``worker``, or None if never claimed."""
        return status.read_status(session, self._get(worker).table, source_id)

    def has_execution_status(
        self, *, worker: str, source_id: Any, statuses: Iterable[ExecutionStatus | str]
    ) -> sa.ColumnElement[bool]:
        """An EXISTS expression: ``worker``'s record of ``source_id`` is in ``statuses``."""
        return status.has_status(self._get(worker).table, source_id, statuses)

    def backlog(self, worker: str, *, cap: int = 1000) -> int:
        """How many items of ``worker`` are claimable now, counting at most ``cap``."""
        w = self._get(worker)
        with connect(self.engine) as conn:
            return status.backlog(conn, w.table, w.key, w.eligible, cap=cap, after=_fleet_low(conn, w))

    def registrations(self) -> list[RegisteredWorker]:
        """Every registered worker, frozen, in registration order."""
        return list(self._registry.values())

    def handler_pids(self) -> list[int]:
        """Process ids of the handler processes of the running loops (for diagnostics and tests)."""
        return [pid for loop in self._loops for pid in loop.pool.pids()]

    def dead_threads(self) -> list[str]:
        """The loops and lease keeper that are no longer running while this coordinator runs
        (whatever ended them), by name, for ``/healthz``; empty before start and after stop."""
        if not self._started or self._stopped:
            return []
        threads = [(f"loop of worker {loop.worker.name!r}", loop.thread) for loop in self._loops]
        threads += [("lease keeper", self._keeper.thread)] if self._keeper is not None else []
        return [name for name, t in threads if t.ident is not None and not t.is_alive()]  # started, ended

    def wake(self, worker: str | None = None) -> None:
        """Have ``worker``'s loop (every loop: None) claim now instead of at its next poll."""
        for loop in self._loops:
            if worker is None or loop.worker.name == worker:
                loop.wake()

    def ping(self) -> None:
        """One round trip to the database; raises what the driver raises when it is unreachable."""
        with connect(self.engine) as conn:
            dialects.ping(conn)

    # --- tables --------------------------------------------------------------------------
    def create_worker_tables(self, *, wakeup_triggers: bool = True) -> list[str]:
        """Create the work tables that do not exist (and bring existing ones up to date);
        with the wake-up triggers on the source tables unless ``wakeup_triggers=False``
        (see ``upgrade_worker_tables``)."""
        return self.upgrade_worker_tables(wakeup_triggers=wakeup_triggers)

    def install_notify_triggers(self) -> list[str]:
        """Put the wake-up triggers on every worker's source table (``upgrade_worker_tables``
        does it by default); return what was done. Idempotent: triggers already current
        are left alone."""
        return upgrade.wakeup_triggers(self.engine, self._sources(), install=True)

    def upgrade_worker_tables(self, *, wakeup_triggers: bool = True) -> list[str]:
        """Create or upgrade every work table and dbworker's own tables (``dbworker_ticks``
        when a periodic worker is registered); idempotent and safe
        from many processes at once. Return the changes made.

        ``wakeup_triggers`` (default on) also puts triggers on each worker's SOURCE table,
        the application's own, so committed inserts and updates wake the workers at once
        instead of at their next poll, naming the rows: on PostgreSQL one NOTIFY per
        statement; on MySQL/MariaDB and SQLite a row per changed row in
        ``dbworker_changes``, which coordinators read and prune. ``False`` removes them
        (workers then poll: pick-up waits up to ``max_poll_seconds``).
        """
        scheduled = [ticks.TABLE] if any(w.schedule for w in self._registry.values()) else []
        own = [*scheduled, *(w.table for w in self._registry.values()), pauses.TABLE, sweeps.TABLE]
        changes = upgrade.ensure(self.engine, own)
        return changes + upgrade.wakeup_triggers(self.engine, self._sources(), install=wakeup_triggers)

    def _sources(self) -> list[sa.Table]:
        return [w.key.table for w in self._registry.values()]

    # --- running ---------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The coordinator's engine: the session factory's bind."""
        if self._engine is None:
            with self._session_factory() as session:
                bind = session.get_bind()
            self._engine = bind.engine if isinstance(bind, Connection) else bind
        if self._transaction_pooler:
            poolers.no_prepared_statements(self._engine)  # idempotent; covers connections pooled already
        return self._engine

    def start(self, workers: Iterable[str] | None = None) -> None:
        """Start claiming and running handlers in the background; return at once.

        ``workers`` limits which registered workers run (default: all).
        Raises ``ValueError`` for an in-memory SQLite URL or anything that cannot be
        pickled to handler processes, ``KeyError`` for an unknown worker name and
        ``RuntimeError`` when started twice or when a work table has an older layout
        (``upgrade_worker_tables()`` brings it up to date).
        """
        with self._lock:
            if self._started:
                raise RuntimeError("this coordinator was already started; create a new one to start again")
            if _is_memory_sqlite(self._url):
                raise ValueError(
                    "database_url is an in-memory SQLite database, which handler processes cannot "
                    "share; use a file, e.g. 'sqlite:///work.db'"
                )
            names = list(self._registry) if workers is None else list(workers)
            selected = [self._get(n) for n in names]
            configs = {w.name: self._child_config(w) for w in selected}
            _check_layout(self.engine, [w.table for w in selected])
            self._started = True
        engine = self.engine
        if engine.dialect.name == "sqlite":
            _sqlite_wal(engine)
        _pause_table(engine)
        # Every registered worker counts, started here or not: other pods start the others.
        router = Router(self._registry.values())
        fed = self._fed_sources(engine, [w.key.table for w in selected])
        hint = poolers.Hint(transaction_pooler=self._transaction_pooler)
        self._loops = [
            WorkerLoop(
                w,
                engine=engine,
                settings=self._settings,
                child_config=configs[w.name],
                observer=self._observers,
                on_item_done=router.item_done,
                secrets=self._secrets,
                fed=w.key.table.name in fed,
                shares_source=sum(o.key.table is w.key.table for o in self._registry.values()) > 1,
                hint=hint,
            )
            for w in selected
        ]
        router.attach(self._loops)
        self._listener = self._make_listener(engine, router)
        if self._listener is not None:
            router.announce = self._listener.announce_done
        self._feed = self._make_feed(engine, router, fed)
        if self._feed is not None:
            router.announce = self._feed.announce_done
            self._feed.prime()  # before the loops' first claims: what comes after is in it
        if engine.dialect.name == "sqlite":
            # A commit seen: the change table names what changed (every write to a source,
            # give-backs, resets, ended items others wait for). Without it every loop looks.
            on_change = router.committed if self._feed is None else self._feed.read_now
            self._watcher = sqlite.DataVersionWatcher(engine, on_change, secrets=self._secrets)
        scheduled = [(w.schedule, w.table) for w in selected if w.schedule is not None]
        if scheduled:
            self._ticker = inserter.TickInserter(engine, scheduled, wake=self.wake, secrets=self._secrets)
        self._keeper = LeaseKeeper(
            self._loops, lease_seconds=self._settings.lease_seconds,
            observer=self._observers, secrets=self._secrets, hint=hint,
        )
        self._observers.coordinator_started(
            dialect=self.dialect_name, slots={w.name: w.concurrency for w in selected}
        )
        _running.add(self)
        for loop in self._loops:
            loop.start()
        self._keeper.start()
        if self._listener is not None:
            self._listener.start()
        if self._watcher is not None:
            self._watcher.start()
        if self._feed is not None:
            self._feed.start()
        if self._ticker is not None:
            self._ticker.start()

    def _child_config(self, worker: RegisteredWorker) -> ChildConfig:
        url = self._url.render_as_string(hide_password=False)
        config = ChildConfig(
            worker=worker.name,
            database_url=url,
            engine_options=(
                poolers.child_engine_options(self._engine_options, url)
                if self._transaction_pooler else self._engine_options
            ),
            handler=worker.handler,
            source=worker.source,
            parent_pid=os.getpid(),
            log=_child_logging(),
            retry=worker.retry,
        )
        try:
            pickle.dumps(config)
        except Exception as exc:
            raise ValueError(
                f"worker {worker.name!r}: its handler, source model or engine_options cannot be "
                f"pickled to handler processes ({redact.describe(exc, self._secrets)}); define "
                "handlers as module-level functions and pass only plain engine options"
            ) from None
        return config

    def _fed_sources(self, engine: Engine, sources: list[sa.Table]) -> set[str]:
        """Names of the source tables with the wake-up triggers (and a reader for them)."""
        postgres_listens = self._listens(engine)
        try:
            with connect(engine) as conn:
                if postgres_listens:
                    return {t.name for t in sources if notify.installed(conn, t)}
                if engine.dialect.name == "postgresql" or upgrade.missing(engine, [sql_changes.TABLE]):
                    return set()
                return {t.name for t in sources if sql_changes.has_triggers(conn, t)}
        except Exception as exc:  # noqa: BLE001 - polling covers it
            log.info("dbworker: could not look for the wake-up triggers: %s", redact.describe(exc, self._secrets))
            return set()

    def _make_feed(self, engine: Engine, router: Router, fed: set[str]) -> changes.ChangeFeed | None:
        """MySQL/MariaDB and SQLite: the change table's reader, where its triggers are installed."""
        if engine.dialect.name == "postgresql":
            return None
        if not fed:
            log.info("dbworker: no wake-up triggers on the source tables (`dbworker migrate` installs "
                     "them): workers poll")  # fmt: skip
            return None
        return changes.ChangeFeed(engine, router.notified, router.committed, secrets=self._secrets)

    def _listens(self, engine: Engine) -> bool:
        """Whether a PostgreSQL listener runs: psycopg, and a session to LISTEN on (not
        through a transaction pooler unless ``listen_url`` gives a direct one)."""
        psycopg = engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        return psycopg and (self._listen_url is not None or not self._transaction_pooler)

    def _make_listener(self, engine: Engine, router: Router) -> postgres.Listener | None:
        if not self._listens(engine):
            if engine.dialect.name == "postgresql" and self._transaction_pooler:
                log.info(poolers.POLL_ONLY)
            return None  # polling only
        if self._listen_url is not None:
            # A session of its own on the server itself, opened and closed by the listener.
            engine = sa.create_engine(self._listen_url, poolclass=NullPool)
        return postgres.Listener(engine, router.notified, secrets=self._secrets, on_resumed=router.committed)

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming and wait for running handlers to finish.

        With ``timeout`` (seconds), handlers still running at the deadline are ended and
        their claims given back at once; the call returns within the timeout plus a few
        seconds' margin, whatever the database does.
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0):
            raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
        with self._lock:
            if not self._started or self._stopped:
                return
            self._stopped = True
        for loop in self._loops:
            loop.request_stop()
        deadline = None if timeout is None else time.monotonic() + timeout
        # Told once no loop claims any more: a claim under way ends first (bounded, as a
        # loop stuck in a database call may not answer).
        seen_by = time.monotonic() + (STOP_SEEN_SECONDS if timeout is None else min(STOP_SEEN_SECONDS, timeout))
        for loop in self._loops:
            loop.claims_stopped.wait(max(0.0, seen_by - time.monotonic()))
        self._observers.draining(draining=True)
        if self._ticker is not None:
            self._ticker.stop()  # no tick is inserted that a draining fleet would leave unrun
        while any(loop.alive for loop in self._loops):
            if self._abort.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
            for loop in self._loops:
                loop.thread.join(0.05)
        self._finish()

    def abort(self) -> None:
        """End every running handler now and give its claim back; returns within a few seconds."""
        self._abort.set()
        with self._lock:
            if not self._started:
                return
            first = not self._stopped
            self._stopped = True
        if first:
            for loop in self._loops:
                loop.request_stop()
            self._observers.draining(draining=True)
        self._finish()

    def _finish(self) -> None:
        for loop in self._loops:
            if loop.alive:
                loop.end_running()
        end = time.monotonic() + STOP_MARGIN_SECONDS
        for loop in self._loops:
            loop.thread.join(max(0.0, end - time.monotonic()))
            if loop.alive:
                # Stuck in a database call: its handler processes must not outlive us.
                log.warning("dbworker worker %s: loop did not stop in time; ending its processes", loop.worker.name)
                loop.pool.kill_all()
        if self._listener is not None:
            self._listener.stop()
        if self._watcher is not None:
            self._watcher.stop()
        if self._feed is not None:
            self._feed.stop()
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker.thread.join(max(0.0, end - time.monotonic()))
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper.thread.join(max(0.0, end - time.monotonic()))
        _running.discard(self)

    # --- helpers -------------------------------------------------------------------------
    def _get(self, name: str) -> RegisteredWorker:
        try:
            return self._registry[name]
        except KeyError:
            known = ", ".join(sorted(self._registry)) or "none"
            raise KeyError(f"unknown worker {name!r} (registered: {known})") from None

    def _check_not_started(self, what: str) -> None:
        if self._started:
            raise RuntimeError(f"{what}() must be called before start()")

    def __repr__(self) -> str:
        return f"<Coordinator {self.database_url} workers={sorted(self._registry)}>"


def _check_layout(engine: Engine, work_tables: list[sa.Table]) -> None:
    """``RuntimeError`` naming the fix when a work table has an older layout than this release's.

    A database that cannot be reached now is not an error here: the loops outlive outages.
    """
    try:
        lacking = upgrade.lacking_columns(engine, work_tables)
    except Exception as exc:  # noqa: BLE001 - the loops report database errors as they go
        log.info("dbworker: could not check the work tables' layout: %s", redact.describe(exc))
        return
    if lacking:
        named = upgrade.describe_lacking(lacking)
        raise RuntimeError(
            f"work tables need an upgrade ({named}): run `dbworker migrate MODULE:ATTR` or "
            "coordinator.upgrade_worker_tables() (create_worker_tables() does it too) before start()"
        )


def _fleet_low(conn: Connection, worker: RegisteredWorker) -> Any:
    """Where the fleet's last wrap of ``worker`` left off, as a key to count after (None:
    unknown, or above the source's top key, as after the table was emptied)."""
    try:
        after = sweeps.after(sweeps.low(conn, worker.name), worker.key)
        conn.rollback()
    except sa.exc.DBAPIError:  # no dbworker_sweeps (not migrated): count it all
        conn.rollback()
        return None
    if after is None:
        return None
    top = claims.top_key(conn, worker.key)
    return after if top is not None and after <= top else None


def _pause_table(engine: Engine) -> None:
    # Loops read pauses every second: a database migrated by an older release gets the table
    # here (idempotent); one that cannot be reached now or refuses DDL is logged, not fatal.
    try:
        if upgrade.missing(engine, [pauses.TABLE]):
            upgrade.ensure(engine, [pauses.TABLE])
    except Exception as exc:  # noqa: BLE001 - the loops outlive database errors
        log.info("dbworker: could not create the %s table: %s", pauses.TABLE_NAME, redact.describe(exc))


def _sqlite_wal(engine: Engine) -> None:
    # WAL lets handler processes read while another writes; the setting persists in the file.
    try:
        with engine.connect() as conn:
            dialects.sqlite_wal(conn)
    except Exception as exc:
        log.info("dbworker: could not switch SQLite to WAL: %s", redact.describe(exc))


@atexit.register
def _abort_running() -> None:
    # An interpreter exiting without stop(): end handler processes and give their claims back.
    for coordinator in list(_running):
        coordinator.abort()


def _child_logging() -> tuple[str, str, tuple[str, ...]] | None:
    """The command's logging set-up, for handler processes to repeat (None inside an application)."""
    active = logs.active()
    return None if active is None else (active[0], active[1], logs.masked())
