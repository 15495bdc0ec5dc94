"""The ``Coordinator`` facade: settings checks, registration, start/stop, status calls.

It validates everything an application hands it before anything runs, then wires one
``WorkerLoop`` per worker and one ``LeaseKeeper``; the loops own the handler processes.
Status reads and the ``has_execution_status`` expression are thin calls into ``status``.
"""

from __future__ import annotations

import atexit
import dataclasses
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

from dbworker import logs, redact, settings
from dbworker.child import ChildConfig
from dbworker.contract import Eligible, ExecutionStatus
from dbworker.leases import LeaseKeeper
from dbworker.loop import WorkerLoop
from dbworker.observe import Observer, Observers
from dbworker.retries import Retry
from dbworker.sql import dialects, status, tables, upgrade
from dbworker.sql.dialects import connect
from dbworker.wakeups import postgres, sqlite
from dbworker.wakeups.router import Router
from dbworker.workers import (
    RegisteredWorker,
    WorkerViews,
    check_concurrency,
    check_name,
    check_retry,
    check_timeout,
)

log = logging.getLogger("dbworker")

F = TypeVar("F", bound=Callable[..., Any])

STOP_MARGIN_SECONDS = 5.0  # after a stop deadline: time to end processes and give claims back

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
    ) -> None:
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
    ) -> None:
        """Override timing settings before ``start()`` (same rules as the constructor)."""
        self._check_not_started("configure")
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
    ) -> Callable[[F], F]:
        """Register the decorated function as worker ``name``'s handler; return it unchanged.

        ``retry``: how failed attempts are tried again (None: a failure is final, as in
        SPEC). ``timeout``: seconds a handler may run before its process is ended and the
        attempt fails (None: no limit). Bad arguments raise ``ValueError`` naming them.
        """
        self._check_not_started("transactional_worker")
        check_name(name)
        if name in self._registry:
            raise ValueError(f"worker name {name!r} is already registered on this coordinator")
        key = tables.source_key(source)
        if eligible is not None and not callable(eligible):
            raise ValueError(f"eligible must be a zero-argument callable returning a select(), got {eligible!r}")
        check_concurrency(concurrency)
        retry = check_retry(retry)
        timeout = check_timeout(timeout)
        table = tables.work_table(name, source)

        def register(handler: F) -> F:
            if not callable(handler):
                raise ValueError(f"worker {name!r}: the handler must be a function, got {handler!r}")
            if name in self._registry:
                raise ValueError(f"worker name {name!r} is already registered on this coordinator")
            self._check_not_started("transactional_worker")
            self._registry[name] = RegisteredWorker(
                name=name, source=source, handler=handler, eligible=eligible,
                concurrency=concurrency, table=table, key=key, retry=retry, timeout=timeout,
            )
            return handler

        return register

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
            return status.backlog(conn, w.table, w.key, w.eligible, cap=cap)

    def registrations(self) -> list[RegisteredWorker]:
        """Every registered worker, frozen, in registration order."""
        return list(self._registry.values())

    def handler_pids(self) -> list[int]:
        """Process ids of the handler processes of the running loops (for diagnostics and tests)."""
        return [pid for loop in self._loops for pid in loop.pool.pids()]

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
    def create_worker_tables(self) -> None:
        """Create the work tables that do not exist (and bring existing ones up to date)."""
        upgrade.ensure(self.engine, [w.table for w in self._registry.values()])

    def install_notify_triggers(self) -> list[str]:
        """PostgreSQL: put the wake-up trigger on every worker's source table (opt-in).

        With it, a committed insert or update of a source row wakes the workers at once
        (LISTEN/NOTIFY) instead of at their next poll, naming the rows (one notification per
        statement), so one that became eligible behind the claim sweep is claimed by key.
        Idempotent (replaces triggers of the same names); a no-op elsewhere. Remove
        with ``DROP TRIGGER dbworker_notify ON <table>``, ``DROP TRIGGER
        dbworker_notify_update ON <table>`` and ``DROP FUNCTION dbworker_notify_<table>()``.
        """
        return upgrade.install_notify_triggers(self.engine, [w.key.table for w in self._registry.values()])

    def upgrade_worker_tables(self) -> list[str]:
        """Create or upgrade every work table; idempotent and safe from many processes at once."""
        return upgrade.ensure(self.engine, [w.table for w in self._registry.values()])

    # --- running ---------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The coordinator's engine: the session factory's bind."""
        if self._engine is None:
            with self._session_factory() as session:
                bind = session.get_bind()
            self._engine = bind.engine if isinstance(bind, Connection) else bind
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
        # Every registered worker counts, started here or not: other pods start the others.
        router = Router(self._registry.values())
        self._loops = [
            WorkerLoop(
                w,
                engine=engine,
                settings=self._settings,
                child_config=configs[w.name],
                observer=self._observers,
                on_item_done=router.item_done,
                secrets=self._secrets,
            )
            for w in selected
        ]
        router.attach(self._loops)
        self._listener = self._make_listener(engine, router)
        if self._listener is not None:
            router.announce = self._listener.announce_done
        if engine.dialect.name == "sqlite":
            self._watcher = sqlite.DataVersionWatcher(engine, router.committed, secrets=self._secrets)
        self._keeper = LeaseKeeper(
            self._loops, lease_seconds=self._settings.lease_seconds,
            observer=self._observers, secrets=self._secrets,
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

    def _child_config(self, worker: RegisteredWorker) -> ChildConfig:
        config = ChildConfig(
            worker=worker.name,
            database_url=self._url.render_as_string(hide_password=False),
            engine_options=self._engine_options,
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

    def _make_listener(self, engine: Engine, router: Router) -> postgres.Listener | None:
        if engine.dialect.name != "postgresql" or engine.dialect.driver != "psycopg":
            return None  # polling only
        return postgres.Listener(engine, router.notified, secrets=self._secrets)

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
        self._observers.draining(draining=True)
        for loop in self._loops:
            loop.request_stop()
        deadline = None if timeout is None else time.monotonic() + timeout
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
            self._observers.draining(draining=True)
            for loop in self._loops:
                loop.request_stop()
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
