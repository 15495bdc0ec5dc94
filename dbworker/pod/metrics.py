"""Every ``dbworker_*`` Prometheus series, built on a registry the caller passes in.

``WorkerMetrics`` owns the series and is an ``Observer``: the coordinator's events become
samples. ``BacklogSampler`` asks the coordinator for each worker's claimable count on an
interval. Serving the registry over HTTP is ``httpserver``'s job; this module never touches
prometheus_client's global ``REGISTRY``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dbworker import observe, redact

log = logging.getLogger("dbworker.metrics")

# Handler runs span milliseconds (no-op items) to an hour (batch jobs); without the long
# buckets everything slow lands in +Inf and the histogram says nothing.
HANDLER_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)  # fmt: skip
# A claim is one or two short statements; seconds here mean lock waits or a sick server.
CLAIM_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

DEFAULT_BACKLOG_CAP = 1000


class WorkerMetrics(observe.Observer):
    """The worker pod's series on ``registry``, updated from coordinator events.

    ``touch()`` creates every known label set at zero so dashboards and alerts see the
    series before the first event; ``coordinator_started`` calls it too.
    """

    def __init__(self, registry: CollectorRegistry, *, version: str) -> None:
        self.version = version
        self._lock = threading.Lock()
        self._touched: set[str] = set()
        self.claims = Counter(
            "dbworker_claims",
            "Work items claimed.",
            ["worker"],
            registry=registry,
        )
        self.leases_taken_over = Counter(
            "dbworker_leases_taken_over",
            "Claims that took an item whose previous lease had expired (its process died).",
            ["worker"],
            registry=registry,
        )
        self.executions = Counter(
            "dbworker_executions",
            "Handler executions by outcome: finished, unfinished, failed, crashed (the "
            "handler process died), timed_out (ran past the worker's timeout), retried (the "
            "attempt failed and the worker's Retry tries again later), lost (claim lost before "
            "commit), aborted (drain deadline), deleted (the source row was deleted while its handler "
            "ran; result discarded). Final failures: failed, crashed, timed_out.",
            ["worker", "outcome"],
            registry=registry,
        )
        self.attempts = Counter(
            "dbworker_attempts",
            "Handler invocations (attempts), retries included.",
            ["worker"],
            registry=registry,
        )
        self.handler_duration = Histogram(
            "dbworker_handler_duration_seconds",
            "Time spent in the handler, by outcome.",
            ["worker", "outcome"],
            buckets=HANDLER_BUCKETS,
            registry=registry,
        )
        self.claim_duration = Histogram(
            "dbworker_claim_duration_seconds",
            "Database time of one claim round trip.",
            ["worker"],
            buckets=CLAIM_BUCKETS,
            registry=registry,
        )
        self.handlers_active = Gauge(
            "dbworker_handlers_active",
            "Handlers running now.",
            ["worker"],
            registry=registry,
        )
        self.handler_slots = Gauge(
            "dbworker_handler_slots",
            "Handler processes this worker may run at once (its concurrency).",
            ["worker"],
            registry=registry,
        )
        self.loop_lag = Gauge(
            "dbworker_event_loop_lag_seconds",
            "Async handler processes: the worst lag of the process's event loop over the last second "
            "(a coroutine that blocks the loop shows here; docs/async.md).",
            ["worker", "process"],
            registry=registry,
        )
        self.items_in_flight = Gauge(
            "dbworker_items_in_flight",
            "Async handler processes: items the process runs now, as coroutines.",
            ["worker", "process"],
            registry=registry,
        )
        self.lease_renewals = Counter(
            "dbworker_lease_renewals",
            "Lease renewals by result: renewed, lost (another claim owns the item), error.",
            ["worker", "result"],
            registry=registry,
        )
        self.db_errors = Counter(
            "dbworker_db_errors",
            "Failed database operations: claim, renew, complete, backlog, prune.",
            ["worker", "operation"],
            registry=registry,
        )
        self.backlog = Gauge(
            "dbworker_backlog",
            "Items claimable now (sampled; counting stops at a cap).",
            ["worker"],
            registry=registry,
        )
        self.limit_waiting = Gauge(
            "dbworker_limit_waiting_items",
            "Workers with limits: claimable items no pod can start now because of a limit (not in "
            "dbworker_backlog; sampled with it, with its cap; by worker only: keys are unbounded).",
            ["worker"],
            registry=registry,
        )
        self.progress_items = Gauge(
            "dbworker_progress_items",
            "Items running now whose handler reported a fraction done (dbworker.report_progress; "
            "sampled with the backlog, fleet-wide).",
            ["worker"],
            registry=registry,
        )
        self.progress_fraction = Gauge(
            "dbworker_progress_mean_fraction",
            "Mean fraction done (0 to 1) of the items counted by dbworker_progress_items (0 when none).",
            ["worker"],
            registry=registry,
        )
        self.heartbeat_timestamp = Gauge(
            "dbworker_loop_heartbeat_timestamp_seconds",
            "Unix time of the worker loop's last completed database round trip.",
            ["worker"],
            registry=registry,
        )
        self.draining_gauge = Gauge(
            "dbworker_draining",
            "1 while the process has stopped claiming and waits for running handlers.",
            registry=registry,
        )
        self.paused_gauge = Gauge(
            "dbworker_paused",
            "1 while the worker is paused fleet-wide (dbworker pause, the console): no claims.",
            ["worker"],
            registry=registry,
        )
        self.notifications_ignored = Counter(
            "dbworker_notifications_ignored",
            "Wake-up notifications ignored, by reason: malformed (names a registered table or "
            "worker in a form dbworker never sends, e.g. a key not of the key's type), foreign "
            "(names nothing registered here). Anyone allowed to NOTIFY on the channel can send one.",
            ["reason"],
            registry=registry,
        )
        for reason in observe.IGNORED_REASONS:
            self.notifications_ignored.labels(reason)
        self.build_info = Gauge(
            "dbworker_build_info",
            "Always 1; labels say the dbworker version and the database dialect.",
            ["version", "dialect"],
            registry=registry,
        )

        self._per_item: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._active: dict[str, Any] = {}

    def touch(
        self,
        workers: Iterable[str],
        *,
        dialect: str | None = None,
        slots: Mapping[str, int] | None = None,
        processes: Mapping[str, int] | None = None,
    ) -> None:
        """Create every label set of ``workers`` at zero; set slots and build info if known.
        ``processes``: the handler processes of async workers (their loop series, per process)."""
        with self._lock:
            for worker, n in (processes or {}).items():
                for process in range(n):
                    self.loop_lag.labels(worker, str(process))
                    self.items_in_flight.labels(worker, str(process))
            for worker in workers:
                if worker not in self._touched:
                    self._touched.add(worker)
                    self.claims.labels(worker)
                    self.attempts.labels(worker)
                    self.leases_taken_over.labels(worker)
                    self.claim_duration.labels(worker)
                    self.handlers_active.labels(worker)
                    self.handler_slots.labels(worker)
                    self.backlog.labels(worker)
                    self.limit_waiting.labels(worker)
                    self.progress_items.labels(worker)
                    self.progress_fraction.labels(worker)
                    self.heartbeat_timestamp.labels(worker)
                    self.paused_gauge.labels(worker)
                    for outcome in observe.OUTCOMES:
                        self.executions.labels(worker, outcome)
                        self.handler_duration.labels(worker, outcome)
                    for result in observe.RENEWAL_RESULTS:
                        self.lease_renewals.labels(worker, result)
                    for operation in observe.OPERATIONS:
                        self.db_errors.labels(worker, operation)
            for worker, n in (slots or {}).items():
                self.handler_slots.labels(worker).set(n)
            if dialect is not None:
                # One build_info series: a second dialect label would read as two builds.
                self.build_info.clear()
                self.build_info.labels(self.version, dialect).set(1)

    # Observer hooks: each is one sample update, quick and thread-safe (prometheus_client
    # metrics lock internally).

    def coordinator_started(self, *, dialect: str, slots: dict[str, int]) -> None:
        self.touch(slots, dialect=dialect, slots=slots)

    def claimed(self, worker: str, *, count: int, taken_over: int, seconds: float) -> None:
        if count:
            self.claims.labels(worker).inc(count)
        if taken_over:
            self.leases_taken_over.labels(worker).inc(taken_over)
        self.claim_duration.labels(worker).observe(max(seconds, 0.0))

    def executed(self, worker: str, *, outcome: str, seconds: float | None) -> None:
        # Once per item: the labelled series are looked up once (``labels()`` locks and checks).
        found = self._per_item.get((worker, outcome))
        if found is None:
            found = (self.executions.labels(worker, outcome), self.attempts.labels(worker),
                     self.handler_duration.labels(worker, outcome))  # fmt: skip
            self._per_item[(worker, outcome)] = found
        executions, attempts, duration = found
        executions.inc()
        attempts.inc()
        if seconds is not None:
            duration.observe(max(seconds, 0.0))

    def active(self, worker: str, *, running: int) -> None:
        gauge = self._active.get(worker)
        if gauge is None:
            gauge = self._active[worker] = self.handlers_active.labels(worker)
        gauge.set(running)

    def renewed(self, worker: str, *, result: str, count: int) -> None:
        if count:
            self.lease_renewals.labels(worker, result).inc(count)

    def db_error(self, worker: str, *, operation: str, error: BaseException) -> None:
        self.db_errors.labels(worker, operation).inc()

    def heartbeat(self, worker: str, *, timestamp: float) -> None:
        self.heartbeat_timestamp.labels(worker).set(timestamp)

    def loop_health(self, worker: str, *, process: int, lag_seconds: float, in_flight: int) -> None:
        self.loop_lag.labels(worker, str(process)).set(lag_seconds)
        self.items_in_flight.labels(worker, str(process)).set(in_flight)

    def draining(self, *, draining: bool) -> None:
        self.draining_gauge.set(1 if draining else 0)

    def paused(self, worker: str, *, paused: bool) -> None:
        self.paused_gauge.labels(worker).set(1 if paused else 0)

    def notification_ignored(self, *, reason: str) -> None:
        self.notifications_ignored.labels(reason).inc()


class BacklogSampler:
    """A daemon thread setting ``dbworker_backlog`` from ``backlog(worker, cap=...)``, and
    the progress gauges from ``progress(worker)`` (count, mean fraction or None) and
    ``dbworker_limit_waiting_items`` from ``waiting(worker, cap=...)`` (None: the worker has no
    limits, nothing read) if given.

    ``backlog`` is the coordinator's method; a failing call counts as a ``backlog`` database
    error and leaves the last value in place. ``interval <= 0`` means never sample.
    """

    def __init__(
        self,
        backlog: Callable[..., int],
        metrics: WorkerMetrics,
        workers: Iterable[str],
        *,
        interval: float,
        cap: int = DEFAULT_BACKLOG_CAP,
        progress: Callable[[str], tuple[int, float | None]] | None = None,
        waiting: Callable[..., int | None] | None = None,
    ) -> None:
        self._backlog = backlog
        self._waiting = waiting
        self._progress = progress
        self._metrics = metrics
        self._workers = list(workers)
        self._interval = interval
        self._cap = cap
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> None:
        """Query every worker's backlog once (the thread's loop body; tests call it directly)."""
        for worker in self._workers:
            if self._stopping.is_set():
                return
            try:
                value = self._backlog(worker, cap=self._cap)
            except Exception as exc:  # counted and logged; the pod goes on
                self._metrics.db_error(worker, operation="backlog", error=exc)
                log.warning("backlog of worker %r failed: %s", worker, redact.redact(str(exc)))
            else:
                self._metrics.backlog.labels(worker).set(value)
            if self._waiting is not None:
                self._sample_waiting(worker)
            if self._progress is not None:
                try:
                    count, mean = self._progress(worker)
                except Exception as exc:  # counted and logged; the pod goes on
                    self._metrics.db_error(worker, operation="backlog", error=exc)
                    log.warning("progress of worker %r failed: %s", worker, redact.redact(str(exc)))
                else:
                    self._metrics.progress_items.labels(worker).set(count)
                    self._metrics.progress_fraction.labels(worker).set(mean or 0.0)

    def _sample_waiting(self, worker: str) -> None:
        assert self._waiting is not None
        try:
            value = self._waiting(worker, cap=self._cap)
        except Exception as exc:  # counted and logged; the pod goes on
            self._metrics.db_error(worker, operation="backlog", error=exc)
            log.warning("items waiting on a limit of worker %r failed: %s", worker, redact.redact(str(exc)))
        else:
            if value is not None:
                self._metrics.limit_waiting.labels(worker).set(value)

    def start(self) -> None:
        if self._interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="dbworker-backlog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.sample_once()
            self._stopping.wait(self._interval)


def new_registry() -> CollectorRegistry:
    """A private registry for one process's series (never prometheus_client's global one)."""
    return CollectorRegistry(auto_describe=True)


def disable_created_series() -> None:
    """Stop exporting ``*_created`` samples (process-wide): they double the series count."""
    from prometheus_client import disable_created_metrics

    disable_created_metrics()  # type: ignore[no-untyped-call]
