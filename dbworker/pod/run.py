"""``dbworker run``: the application's workers wrapped in what a pod needs, until a signal stops them.

Wires metrics, health, the HTTP server and the backlog sampler around a ``Coordinator`` and
waits on ``shutdown``. The series are ``metrics``' job, the verdicts ``health``'s, the port
``httpserver``'s, signals ``shutdown``'s, the work itself the Coordinator's. This module
imports prometheus_client (through metrics and httpserver), so ``cli`` imports it only for run.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from importlib import metadata

import dbworker
from dbworker.pod import app, health, httpserver, metrics, otelmetrics, termination
from dbworker.pod import options as opts
from dbworker.pod import shutdown as shutdowns

log = logging.getLogger("dbworker.cli")  # the command's logger name (log lines show it)


def command(
    options: opts.Options, coordinator: dbworker.Coordinator, shutdown: shutdowns.Shutdown
) -> int:
    """Run the selected workers until ``shutdown`` ends them; the exit code.

    Raises ``termination.CommandError``: exit 2 for bad input (unknown worker, port in use,
    missing tables), 3 when the database does not answer.
    """
    workers = app.select_workers(coordinator, options)
    slots = app.apply_overrides(coordinator, options)
    slots = {name: slots[name] for name in workers}

    registry = metrics.new_registry()
    metrics.disable_created_series()
    worker_metrics = metrics.WorkerMetrics(registry, version=_version())
    async_processes = {w.name: w.process_count for w in coordinator.registrations() if w.name in workers and w.asynchronous}
    worker_metrics.touch(workers, slots=slots, processes=async_processes)
    otel_shutdown = otelmetrics.start(registry)  # the same series over OTLP, when OTEL_* asks
    tracker = health.HealthTracker(coordinator.dead_threads)
    coordinator.add_observer(worker_metrics)
    coordinator.add_observer(tracker)
    bound = health.liveness_bound(
        lease_seconds=coordinator.lease_seconds, max_poll_seconds=coordinator.max_poll_seconds
    )

    server = None
    port: int = options["metrics_port"]
    if port:
        host: str = options["metrics_host"]
        try:
            server = httpserver.HealthServer(
                host=host,
                port=port,
                registry=registry,
                liveness=lambda: health.liveness(tracker.snapshot(), now=time.time(), bound=bound),
                readiness=lambda: health.readiness(tracker.snapshot()),
            ).start()
        except OSError as exc:
            raise termination.CommandError(
                f"cannot listen on {host}:{port} ({options.source('metrics_port')}): {exc.strerror or exc}; "
                "choose another port, or 0 to turn the HTTP server off"
            ) from None
        log.info("serving /metrics, /healthz, /readyz on %s:%s", host, server.port)

    sampler = None
    try:
        app.ping(coordinator)
        # Only now, connected, can the dialect tell MariaDB from MySQL.
        worker_metrics.touch(workers, dialect=coordinator.dialect_name)
        if options["create_tables"]:
            try:
                coordinator.upgrade_worker_tables(wakeup_triggers=not options["no_wakeup_triggers"])
            except Exception as exc:
                raise termination.CommandError(
                    f"creating work tables failed: {termination.one_line(exc)}",
                    termination.database_code(exc),
                ) from None
        app.require_tables(coordinator, workers, options, hint=" or pass --create-tables")
        if shutdown.requested.is_set():
            log.info("stop requested before start; exiting")
            return termination.EXIT_OK
        try:
            coordinator.start(workers)
        except (ValueError, KeyError) as exc:
            raise termination.CommandError(f"cannot start: {termination.one_line(exc)}") from None
        tracker.started(workers)
        shutdown.attach(coordinator)
        log.info(
            "running workers %s (%s) with %s handler slot(s); lease %gs, poll %g-%gs; liveness bound %gs",
            ", ".join(workers), coordinator.dialect_name, sum(slots.values()),
            coordinator.lease_seconds, coordinator.poll_seconds, coordinator.max_poll_seconds, bound,
        )  # fmt: skip
        sampler = metrics.BacklogSampler(
            coordinator.backlog, worker_metrics, workers, interval=options["backlog_seconds"],
            progress=lambda name: coordinator.workers[name].progress(coordinator.engine),
            waiting=lambda name, cap: waiting_count(coordinator, name, cap=cap),
        )  # fmt: skip
        sampler.start()
        shutdown.wait()
        end_leftover_processes()
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.close()
        if otel_shutdown is not None:
            otel_shutdown()
    if shutdown.error is not None:
        return termination.EXIT_UNEXPECTED
    log.info("stopped")
    return termination.EXIT_OK


def end_leftover_processes(timeout: float = 5.0) -> None:
    """Kill handler processes still alive after the coordinator stopped.

    Normally there are none. A worker loop stuck in a database call never shuts its pool
    down; its idle slots would then keep the interpreter waiting forever at exit (it joins
    every non-daemon child), and the pod would sit in Terminating until SIGKILL.
    """
    leftovers = multiprocessing.active_children()
    for process in leftovers:
        log.warning("ending handler process %s left running after stop", process.pid)
        process.kill()
    for process in leftovers:
        process.join(timeout)


def _version() -> str:
    try:
        return metadata.version("dbworker")
    except Exception:  # running from a checkout
        return str(getattr(dbworker, "__version__", "unknown"))


def waiting_count(coordinator: dbworker.Coordinator, worker: str, *, cap: int) -> int | None:
    """``worker``'s items waiting only on a limit (no keys read); None: it has no limits."""
    found = coordinator.workers[worker].waiting_on_limit(coordinator.engine, cap=cap, top=0)
    return None if found is None else found.count
