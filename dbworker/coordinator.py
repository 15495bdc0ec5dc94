"""The ``Coordinator`` facade: registration, status calls, start/stop wiring.

It has ``settings`` validate everything an application hands it before anything runs
and ``startup`` check the database, then wires one ``WorkerLoop`` per worker, one
``LeaseKeeper`` and the wake-up services ``wakeups.services`` picks for the database; the
loops own the handler processes. Status reads and the ``has_execution_status``
expression are thin calls into ``status``.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from dbworker import backlog, redact, running, settings, startup, tracing
from dbworker import workers as checks
from dbworker.contract import Eligible, ExecutionStatus
from dbworker.observe import Observer, Observers
from dbworker.retries import Retry
from dbworker.schedules import policy, ticks
from dbworker.sql import dialects, history, pauses, poolers, status, sweeps, tables, traces, upgrade
from dbworker.sql.dialects import connect
from dbworker.sql.due import Due, column_of
from dbworker.workers import RegisteredWorker, WorkerViews

log = logging.getLogger("dbworker")

F = TypeVar("F", bound=Callable[..., Any])

_live: weakref.WeakSet[Coordinator] = weakref.WeakSet()  # started, not stopped: aborted at exit


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
        history_attempts: int = settings.HISTORY_ATTEMPTS,
        history_days: float = settings.HISTORY_DAYS,
        history_logs: bool = settings.HISTORY_LOGS,
    ) -> None:
        """``history_attempts``, ``history_days``: each item's attempt history keeps its newest
        ``history_attempts`` attempts, none older than ``history_days`` (docs/history.md);
        ``history_logs``: each attempt keeps the log records its handler wrote.
        ``transaction_pooler``: ``database_url`` and the session factory's engine reach
        PostgreSQL through a transaction pooler (PgBouncer ``pool_mode = transaction``):
        no server-side prepared statements on any connection dbworker uses or builds, and no
        LISTEN except on ``listen_url``. ``listen_url``: a direct PostgreSQL URL for the
        one connection that LISTENs for wake-ups (its own, not pooled); without it a
        pooler-mode coordinator polls.
        """
        if not callable(session_factory):
            raise ValueError("session_factory must be the application's sessionmaker (a callable returning a Session)")
        self._url = settings.database_url(database_url)
        self._session_factory = session_factory
        self._engine_options = settings.engine_options(engine_options)
        self._settings = settings.settings(lease_seconds, poll_seconds, max_poll_seconds,
                                           history_attempts=history_attempts, history_days=history_days,
                                           history_logs=history_logs)  # fmt: skip
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
        self._run: running.Running | None = None  # once started
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
    def history_attempts(self) -> int:
        """The newest attempts kept per item in the attempt history (docs/history.md)."""
        return self._settings.history_attempts

    @property
    def history_days(self) -> float:
        """How many days an attempt is kept in the attempt history."""
        return self._settings.history_days

    @property
    def history_logs(self) -> bool:
        """Whether each attempt keeps the log records its handler wrote (docs/history.md)."""
        return self._settings.history_logs

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
        return dialects.name_of(self._url, None if self._engine is None else self._engine.dialect)

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
            history_attempts=s.history_attempts, history_days=s.history_days, history_logs=s.history_logs,
        )

    def set_concurrency(self, name: str, concurrency: int) -> None:
        """Override one worker's concurrency before ``start()``."""
        self._check_not_started("set_concurrency")
        self._registry[name] = checks.with_concurrency(self._get(name), concurrency)

    def set_processes(self, name: str, processes: int) -> None:
        """Override one worker's handler processes before ``start()`` (checked as at registration)."""
        self._check_not_started("set_processes")
        self._registry[name] = checks.with_processes(self._get(name), processes)

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
        processes: int | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as worker ``name``'s handler; return it unchanged.

        ``retry``: how failed attempts are tried again (None: a failure is final, as in
        SPEC). ``timeout``: seconds a handler may run before its process is ended and the
        attempt fails (None: no limit). ``due``: a nullable naive-UTC DateTime column of the
        source (``due=Post.publish_at``); a row is claimable only once it is set and not
        later than the database's clock, and the coordinator wakes for it on time.
        ``processes``: handler processes carrying the ``concurrency`` items; an ``async def``
        handler runs many items per process (default 1), a sync one a process per item (it
        must equal ``concurrency``). Bad arguments raise ``ValueError`` naming them.
        """
        self._check_not_started("transactional_worker")
        self._check_new_name(name)
        key = tables.source_key(source)
        if eligible is not None and not callable(eligible):
            raise ValueError(f"eligible must be a zero-argument callable returning a select(), got {eligible!r}")
        found = None if due is None else Due(column_of(tables.source_mapper(source), due), key, eligible)
        return self._register(name, source, found or eligible, concurrency, retry, timeout, due=found,
                              processes=processes)  # fmt: skip

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

    def _register(self, name: str, source: Any, eligible: Eligible | None, concurrency: int,
                  retry: Retry | None, timeout: float | None, *, due: Due | None = None,
                  schedule: policy.Schedule | None = None, processes: int | None = None) -> Callable[[F], F]:  # fmt: skip
        """Check the arguments every kind of worker shares; return the decorator that registers."""
        key = tables.source_key(source)
        checks.check_concurrency(concurrency)
        retry = checks.check_retry(retry)
        timeout = checks.check_timeout(timeout)
        table = tables.work_table(name, source)
        history.history_table(table)  # beside it in the MetaData, so create_all() makes both
        traces.side_table(key.table)  # the writers' trace contexts (dbworker.otel), the same

        def register(handler: F) -> F:
            checks.check_handler(name, handler)
            checks.check_processes(processes, concurrency=concurrency, handler=handler, name=name)
            if name in self._registry:
                raise ValueError(f"worker name {name!r} is already registered on this coordinator")
            self._check_not_started("transactional_worker" if schedule is None else "periodic")
            self._registry[name] = RegisteredWorker(
                name=name, source=source, handler=handler, eligible=eligible,
                concurrency=concurrency, table=table, key=key, retry=retry, timeout=timeout,
                due=due, schedule=schedule, processes=processes,
            )
            return handler

        return register

    def _check_new_name(self, name: str) -> None:
        checks.check_name(name)
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
        return backlog.count(self.engine, self._get(worker), cap=cap)

    def registrations(self) -> list[RegisteredWorker]:
        """Every registered worker, frozen, in registration order."""
        return list(self._registry.values())

    def handler_pids(self) -> list[int]:
        """Process ids of the handler processes of the running loops (for diagnostics and tests)."""
        return [] if self._run is None else self._run.handler_pids()

    def dead_threads(self) -> list[str]:
        """The loops and lease keeper that are no longer running while this coordinator runs
        (whatever ended them), by name, for ``/healthz``; empty before start and after stop."""
        return [] if self._run is None or self._stopped else self._run.dead_threads()

    def wake(self, worker: str | None = None) -> None:
        """Have ``worker``'s loop (every loop: None) claim now instead of at its next poll."""
        if self._run is not None:
            self._run.wake(worker)

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
        work = [w.table for w in self._registry.values()]
        own = [*scheduled, *work, *map(history.history_table, work), pauses.TABLE, sweeps.TABLE,
               *{id(t): traces.side_table(t) for t in self._sources()}.values()]
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
            startup.check_shared(self._url)
            names = list(self._registry) if workers is None else list(workers)
            selected = [self._get(n) for n in names]
            configs = {w.name: startup.child_config(w, self._url, engine_options=self._engine_options,
                                                    transaction_pooler=self._transaction_pooler,
                                                    secrets=self._secrets, history_logs=self.history_logs,
                                                    history=self.history_attempts > 0)
                       for w in selected}  # fmt: skip
            startup.check_layout(self.engine, [w.table for w in selected])
            self._started = True
        engine = self.engine
        startup.prepare(engine)
        self._run = running.Running(
            engine, self._registry.values(), selected, configs, settings=self._settings, observer=self._observers,
            listen_url=self._listen_url, transaction_pooler=self._transaction_pooler, secrets=self._secrets,
        )  # fmt: skip
        self._observers.coordinator_started(
            dialect=self.dialect_name, slots={w.name: w.concurrency for w in selected}
        )
        _live.add(self)
        self._run.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming and wait for running handlers to finish.

        With ``timeout`` (seconds), handlers still running at the deadline are ended and
        their claims given back at once; the call returns within the timeout plus a few
        seconds' margin, whatever the database does.
        """
        timeout = settings.stop_timeout(timeout)
        with self._lock:
            if self._run is None or self._stopped:
                return
            self._stopped = True
        self._run.drain(timeout, self._abort)
        self._finish(self._run)

    def abort(self) -> None:
        """End every running handler now and give its claim back; returns within a few seconds."""
        self._abort.set()
        with self._lock:
            if self._run is None:
                return
            first = not self._stopped
            self._stopped = True
        if first:
            self._run.request_stop()
            self._observers.draining(draining=True)
        self._finish(self._run)

    def _finish(self, run: running.Running) -> None:
        run.finish()
        _live.discard(self)
        tracing.flush()  # the items' spans reach the exporter before the pod goes

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


@atexit.register
def _abort_running() -> None:
    # An interpreter exiting without stop(): end handler processes and give their claims back.
    for coordinator in list(_live):
        coordinator.abort()
