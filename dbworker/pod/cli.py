"""The ``dbworker`` command: ``run``, ``migrate``, ``inspect`` and ``retry`` an application's workers.

Options come from flags or ``DBWORKER_<OPTION>`` variables (the flag wins) and are checked
by the pure ``parse()``; bad input ends in one line on stderr (also written to
``/dev/termination-log`` for Kubernetes) and exit code 2, an unreachable database in 3.
Signals are ``signals``' job, HTTP ``httpserver``'s, the work itself the ``Coordinator``'s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from dbworker import redact

if TYPE_CHECKING:
    from dbworker.coordinator import Coordinator

log = logging.getLogger("dbworker.pod.cli")

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_DATABASE = 3

ENV_PREFIX = "DBWORKER_"
TERMINATION_LOG = "/dev/termination-log"
# Tests point this elsewhere; in Kubernetes the kubelet creates /dev/termination-log.
TERMINATION_LOG_ENV = "DBWORKER_TERMINATION_LOG"
INSPECT_CAP = 1000
FAILED_LIMIT = 100


class CommandError(Exception):
    """One line for stderr and the exit code that goes with it."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# --- options: one table, used by the parser, the environment and --help -------------------


@dataclass(frozen=True)
class Option:
    flag: str
    kind: str  # str | int | float | bool | list | pairs
    help: str
    commands: tuple[str, ...]
    default: Any = None
    minimum: float | None = None
    positive: bool = False
    choices: tuple[str, ...] = ()
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()


ALL = ("run", "migrate", "inspect", "retry")
OPTIONS: tuple[Option, ...] = (
    Option("--worker", "list", "run/show only this worker (repeatable; the variable takes a comma-separated list); default: all registered workers", ("run", "inspect", "retry"), metavar="NAME"),
    Option("--concurrency", "pairs", "handler processes for worker NAME, overriding the code (repeatable; the variable takes a=2,b=3)", ("run",), metavar="NAME=N"),
    Option("--metrics-port", "int", "port for /metrics, /healthz and /readyz; 0 turns the HTTP server off", ("run",), default=9100, minimum=0, metavar="PORT"),
    Option("--metrics-host", "str", "address the HTTP server listens on", ("run",), default="0.0.0.0", metavar="HOST"),
    Option("--drain-seconds", "float", "after SIGTERM/SIGINT, how long running handlers may finish before they are ended and their claims released", ("run",), default=25.0, minimum=0, metavar="SECONDS"),
    Option("--create-tables", "bool", "create or upgrade the work tables before starting (like `dbworker migrate`)", ("run",), default=False),
    Option("--lease-seconds", "float", "claim lease, overriding the code", ("run",), positive=True, metavar="SECONDS"),
    Option("--poll-seconds", "float", "first wait after finding nothing claimable, overriding the code", ("run",), positive=True, metavar="SECONDS"),
    Option("--max-poll-seconds", "float", "longest wait between polls, overriding the code", ("run",), positive=True, metavar="SECONDS"),
    Option("--backlog-seconds", "float", "how often dbworker_backlog is sampled; 0 turns sampling off", ("run",), default=15.0, minimum=0, metavar="SECONDS"),
    Option("--notify-triggers", "bool", "PostgreSQL: also install the wake-up trigger on each source table, so new and changed rows wake workers at once (LISTEN/NOTIFY) instead of at their next poll", ("migrate",), default=False),
    Option("--failed", "bool", "also list failed items with their errors", ("inspect",), default=False),
    Option("--json", "bool", "print JSON instead of a table", ("inspect",), default=False),
    Option("--all-failed", "bool", "reset every failed item of the worker", ("retry",), default=False),
    Option("--log-format", "str", "log line format", ALL, default="text", choices=("text", "json")),
    Option("--log-level", "str", "log level", ALL, default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
)  # fmt: skip
APP_ENV = ENV_PREFIX + "APP"
COMMAND_HELP = {
    "run": "run the application's workers until SIGTERM/SIGINT",
    "migrate": "create or upgrade the work tables and exit (safe from many pods at once)",
    "inspect": "print per worker how many items are in each status and how many are claimable now",
    "retry": "reset failed items of one worker so they are claimed again",
}
EPILOG = (
    "Every option can also be set by the variable DBWORKER_<OPTION> (e.g. DBWORKER_DRAIN_SECONDS=60; "
    "the flag wins). The database URL is the application's business (typically DATABASE_URL). "
    "Exit codes: 0 clean stop, 1 unexpected error, 2 bad input or configuration, 3 database unreachable."
)


@dataclass(frozen=True)
class Options:
    """The checked options of one invocation; ``sources`` says where each came from."""

    command: str
    app: str
    values: Mapping[str, Any]
    ids: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, dest: str) -> Any:
        return self.values[dest]

    def source(self, dest: str) -> str:
        return self.sources.get(dest, "--" + dest.replace("_", "-"))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser (for ``dbworker --help``); each command has its own below."""
    parser = _Parser(
        prog="dbworker",
        description="Run, migrate, inspect and retry an application's dbworker workers.",
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in ALL:
        sub.add_parser(command, help=COMMAND_HELP[command], add_help=False)
    return parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one command; defaults are applied later so the environment can fill gaps."""
    p = _Parser(prog=f"dbworker {command}", description=COMMAND_HELP[command], epilog=EPILOG)
    p.add_argument(
        "app", nargs="?", metavar="MODULE:ATTR",
        help=f"the application's Coordinator, e.g. myapp.jobs:coordinator [env {APP_ENV}]",
    )  # fmt: skip
    if command == "retry":
        p.add_argument("ids", nargs="*", metavar="ID", help="primary keys of failed items to reset")
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        shown = opt.default not in (None, False)
        text = f"{opt.help} [env {opt.env}" + (f"; default {_show(opt.default)}]" if shown else "]")
        if opt.kind == "bool":
            p.add_argument(opt.flag, action="store_true", default=None, help=text)
        elif opt.kind in ("list", "pairs"):
            p.add_argument(opt.flag, action="append", default=None, metavar=opt.metavar, help=text)
        else:
            choices = "{" + ",".join(c.lower() for c in opt.choices) + "}" if opt.choices else None
            p.add_argument(opt.flag, default=None, metavar=opt.metavar or choices, help=text)
    return p


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Options:
    """Check ``argv`` and ``env`` into ``Options``; ``CommandError`` (exit 2) names the fault."""
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        build_parser().parse_args(argv)  # --help exits here; anything else is an error
        raise CommandError(
            "missing command; use one of run, migrate, inspect, retry (see `dbworker --help`)"
        )
    command = argv[0]
    if command not in ALL:
        raise CommandError(
            f"unknown command {command!r}; use one of run, migrate, inspect, retry (see `dbworker --help`)"
        )
    # Intermixed, so item IDs may follow options: `retry app:c --worker w 1 2`.
    ns = command_parser(command).parse_intermixed_args(argv[1:])
    app = ns.app if ns.app is not None else env.get(APP_ENV, "").strip()
    if not app:
        raise CommandError(
            f"missing MODULE:ATTR (e.g. `dbworker {command} myapp.jobs:coordinator`) or {APP_ENV}"
        )
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        given = getattr(ns, opt.dest)
        if given is not None:
            sources[opt.dest] = opt.flag
            values[opt.dest] = _convert(opt, given, opt.flag)
        elif opt.env in env and env[opt.env].strip() != "":
            sources[opt.dest] = opt.env
            values[opt.dest] = _convert(opt, env[opt.env], opt.env)
        else:
            values[opt.dest] = opt.default
    if command == "run":
        _check_poll_order(values, sources)
    ids: tuple[str, ...] = tuple(getattr(ns, "ids", None) or ())
    if command == "retry":
        workers = values.get("worker") or []
        if len(workers) != 1:
            raise CommandError(
                "retry needs exactly one --worker NAME (the worker whose failed items to reset)"
            )
        if ids and values["all_failed"]:
            raise CommandError("give either item IDs or --all-failed, not both")
        if not ids and not values["all_failed"]:
            raise CommandError("nothing to retry: give failed item IDs or --all-failed")
    return Options(command=command, app=app, values=values, ids=ids, sources=sources)


def _convert(opt: Option, raw: Any, where: str) -> Any:
    if opt.kind == "bool":
        if raw is True:
            return True
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise CommandError(f"{where}={raw!r} is not a boolean; use true or false")
    if opt.kind in ("list", "pairs"):
        items = raw if isinstance(raw, list) else [raw]
        parts = [p.strip() for item in items for p in str(item).split(",") if p.strip()]
        if opt.kind == "list":
            return list(dict.fromkeys(parts))
        return _pairs(parts, where)
    text = str(raw).strip()
    if opt.kind == "str":
        if opt.choices:
            match = [c for c in opt.choices if c.lower() == text.lower()]
            if not match:
                raise CommandError(
                    f"{where} {text!r} is not one of {', '.join(c.lower() for c in opt.choices)}"
                )
            return match[0]
        if not text:
            raise CommandError(f"{where} is empty; give a value")
        return text
    try:
        number: float = int(text) if opt.kind == "int" else float(text)
    except ValueError:
        what = "a whole number" if opt.kind == "int" else "a number"
        raise CommandError(
            f"{where} {text!r} is not {what}; e.g. {_example(where, _show(opt.default) if opt.default is not None else '5')}"
        ) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise CommandError(f"{where} {text!r} is not a finite number")
    if opt.positive and number <= 0:
        raise CommandError(f"{where} must be greater than 0, got {text}")
    if opt.minimum is not None and number < opt.minimum:
        raise CommandError(f"{where} must be at least {_show(opt.minimum)}, got {text}")
    if opt.flag == "--metrics-port" and number > 65535:
        raise CommandError(
            f"{where} {text} is not a port; use 1-65535, or 0 to turn the HTTP server off"
        )
    return number


def _pairs(parts: list[str], where: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for part in parts:
        name, sep, count = part.partition("=")
        name, count = name.strip(), count.strip()
        try:
            n = int(count)
        except ValueError:
            n = 0
        if not sep or not name or n < 1:
            raise CommandError(
                f"malformed {where} {part!r}; expected NAME=N with N >= 1, e.g. {_example(where, 'hash=4')}"
            )
        result[name] = n
    return result


def _check_poll_order(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    poll, max_poll = values.get("poll_seconds"), values.get("max_poll_seconds")
    if poll is not None and max_poll is not None and max_poll < poll:
        raise CommandError(
            f"{sources['max_poll_seconds']} ({_show(max_poll)}) is below {sources['poll_seconds']} "
            f"({_show(poll)}); make the maximum at least the first wait"
        )


def _example(where: str, value: str) -> str:
    """How to write ``value`` for a flag (``--x 5``) or a variable (``DBWORKER_X=5``)."""
    return f"{where} {value}" if where.startswith("--") else f"{where}={value}"


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# --- the application ---------------------------------------------------------------------


def load_app(spec: str) -> Coordinator:
    """Import ``MODULE:ATTR`` and return the Coordinator; ``CommandError`` (exit 2) otherwise."""
    from dbworker.coordinator import Coordinator

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise CommandError(f"malformed MODULE:ATTR {spec!r}; e.g. myapp.jobs:coordinator")
    # A console script's sys.path starts at its own directory; applications expect the
    # working directory, as with `python -m`.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CommandError(
                f"cannot import module {module_name!r} (from {spec!r}): no module named {exc.name!r}; "
                "check the name, the working directory and PYTHONPATH"
            ) from None
        raise CommandError(f"importing {module_name!r} failed: {_one_line(exc)}") from None
    except BaseException as exc:  # an application's import-time failure is bad configuration
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise CommandError(f"importing {module_name!r} failed: {_one_line(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CommandError(
                f"module {module_name!r} has no attribute {attr!r} (from {spec!r}); name the Coordinator object"
            ) from None
        except Exception as exc:  # a lazy attribute may build the Coordinator
            raise CommandError(f"getting {spec!r} failed: {_one_line(exc)}") from None
    if not isinstance(obj, Coordinator):
        raise CommandError(f"{spec!r} is a {type(obj).__name__}, not a dbworker.Coordinator")
    return obj


def select_workers(coordinator: Coordinator, options: Options) -> list[str]:
    """The workers to act on, checked against the registered ones."""
    known = list(coordinator.workers)
    if not known:
        raise CommandError(
            f"{options.app!r} registers no workers; decorate a handler with @coordinator.transactional_worker"
        )
    wanted: list[str] = list(options.values.get("worker") or [])
    for name in wanted:
        if name not in known:
            raise CommandError(
                f"unknown worker {name!r} ({options.source('worker')}); known workers: {', '.join(known)}"
            )
    return wanted or known


def apply_overrides(coordinator: Coordinator, options: Options) -> dict[str, int]:
    """Apply concurrency and timing overrides before start; return the slots per worker."""
    known = list(coordinator.workers)
    pairs: dict[str, int] = options.values.get("concurrency") or {}
    for name, n in pairs.items():
        if name not in known:
            raise CommandError(
                f"unknown worker {name!r} in {options.source('concurrency')}; known workers: {', '.join(known)}"
            )
        coordinator.set_concurrency(name, n)
    settings = {
        k: options.values.get(k) for k in ("lease_seconds", "poll_seconds", "max_poll_seconds")
    }
    given = {k: v for k, v in settings.items() if v is not None}
    if given:
        poll = given.get("poll_seconds", coordinator.poll_seconds)
        max_poll = given.get("max_poll_seconds", coordinator.max_poll_seconds)
        if max_poll < poll:
            where = (
                options.source("max_poll_seconds")
                if "max_poll_seconds" in given
                else options.source("poll_seconds")
            )
            raise CommandError(
                f"{where}: the longest poll wait ({_show(max_poll)}s) would be below the first "
                f"({_show(poll)}s); raise --max-poll-seconds or lower --poll-seconds"
            )
        try:
            coordinator.configure(**given)
        except ValueError as exc:
            raise CommandError(f"{', '.join(options.source(k) for k in given)}: {exc}") from None
    return {name: pairs.get(name, coordinator.workers[name].concurrency) for name in known}


def session_of(coordinator: Coordinator) -> Any:
    """A session on the coordinator's engine, for the views' status calls."""
    from sqlalchemy.orm import Session

    return Session(coordinator.engine)


def ping(coordinator: Coordinator) -> None:
    """One database round trip; ``CommandError`` (exit 3) if the database does not answer."""
    try:
        coordinator.ping()
    except Exception as exc:  # any failure here means unreachable for the operator
        raise CommandError(f"database unreachable: {_one_line(exc)}", EXIT_DATABASE) from None


def require_tables(
    coordinator: Coordinator, workers: Sequence[str], options: Options, *, hint: str = ""
) -> None:
    """``CommandError`` (exit 2) naming work tables that do not exist yet, and the fix."""
    try:
        missing = missing_tables(coordinator, workers)
    except Exception as exc:
        raise CommandError(f"reading the schema failed: {_one_line(exc)}", _db_code(exc)) from None
    if missing:
        raise CommandError(
            f"work table(s) {', '.join(missing)} do not exist; run `dbworker migrate {options.app}` "
            f"first{hint}"
        )


def missing_tables(coordinator: Coordinator, workers: Sequence[str]) -> list[str]:
    """Work tables of ``workers`` that do not exist yet."""
    import sqlalchemy as sa

    inspector = sa.inspect(coordinator.engine)
    missing = []
    for name in workers:
        table = coordinator.workers[name].table
        if not inspector.has_table(table.name, schema=table.schema):
            missing.append(table.name)
    return missing


# --- commands ----------------------------------------------------------------------------


def cmd_run(options: Options, coordinator: Coordinator, shutdown: Any) -> int:
    from dbworker.pod import health, metrics

    workers = select_workers(coordinator, options)
    slots = apply_overrides(coordinator, options)
    slots = {name: slots[name] for name in workers}

    registry = metrics.new_registry()
    metrics.disable_created_series()
    worker_metrics = metrics.WorkerMetrics(registry, version=_version())
    worker_metrics.touch(workers, slots=slots)
    tracker = health.HealthTracker()
    coordinator.add_observer(worker_metrics)
    coordinator.add_observer(tracker)
    bound = health.liveness_bound(
        lease_seconds=coordinator.lease_seconds, max_poll_seconds=coordinator.max_poll_seconds
    )

    server = None
    port: int = options["metrics_port"]
    if port:
        from dbworker.pod import httpserver

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
            raise CommandError(
                f"cannot listen on {host}:{port} ({options.source('metrics_port')}): {exc.strerror or exc}; "
                "choose another port, or 0 to turn the HTTP server off"
            ) from None
        log.info("serving /metrics, /healthz, /readyz on %s:%s", host, server.port)

    sampler = None
    try:
        ping(coordinator)
        # Only now, connected, can the dialect tell MariaDB from MySQL.
        worker_metrics.touch(workers, dialect=coordinator.dialect_name)
        if options["create_tables"]:
            try:
                coordinator.upgrade_worker_tables()
            except Exception as exc:
                raise CommandError(
                    f"creating work tables failed: {_one_line(exc)}", _db_code(exc)
                ) from None
        require_tables(coordinator, workers, options, hint=" or pass --create-tables")
        if shutdown.requested.is_set():
            log.info("stop requested before start; exiting")
            return EXIT_OK
        try:
            coordinator.start(workers)
        except (ValueError, KeyError) as exc:
            raise CommandError(f"cannot start: {_one_line(exc)}") from None
        tracker.started(workers)
        shutdown.attach(coordinator)
        log.info(
            "running workers %s (%s) with %s handler slot(s); lease %gs, poll %g-%gs; liveness bound %gs",
            ", ".join(workers), coordinator.dialect_name, sum(slots.values()),
            coordinator.lease_seconds, coordinator.poll_seconds, coordinator.max_poll_seconds, bound,
        )  # fmt: skip
        sampler = metrics.BacklogSampler(
            coordinator.backlog, worker_metrics, workers, interval=options["backlog_seconds"]
        )
        sampler.start()
        shutdown.wait()
        end_leftover_processes()
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.close()
    if shutdown.error is not None:
        return EXIT_UNEXPECTED
    log.info("stopped")
    return EXIT_OK


def end_leftover_processes(timeout: float = 5.0) -> None:
    """Kill handler processes still alive after the coordinator stopped.

    Normally there are none. A worker loop stuck in a database call never shuts its pool
    down; its idle slots would then keep the interpreter waiting forever at exit (it joins
    every non-daemon child), and the pod would sit in Terminating until SIGKILL.
    """
    import multiprocessing

    leftovers = multiprocessing.active_children()
    for process in leftovers:
        log.warning("ending handler process %s left running after stop", process.pid)
        process.kill()
    for process in leftovers:
        process.join(timeout)


def cmd_migrate(options: Options, coordinator: Coordinator) -> int:
    ping(coordinator)
    try:
        coordinator.upgrade_worker_tables()
        triggers = coordinator.install_notify_triggers() if options["notify_triggers"] else []
    except Exception as exc:
        raise CommandError(
            f"migrating work tables failed: {_one_line(exc)}", _db_code(exc)
        ) from None
    tables = [coordinator.workers[name].table.name for name in coordinator.workers]
    print(f"work tables up to date: {', '.join(tables) or '(no workers)'}")
    if options["notify_triggers"]:
        print(f"wake-up triggers: {', '.join(triggers) or 'none (not PostgreSQL: workers poll)'}")
    return EXIT_OK


def inspect_report(
    coordinator: Coordinator, workers: Sequence[str], *, failed: bool
) -> list[dict[str, Any]]:
    """Per worker: counts by status, claimable now (capped), and failed items if asked."""
    from dbworker.contract import ExecutionStatus

    report = []
    for name in workers:
        view = coordinator.workers[name]
        with session_of(coordinator) as session:
            counts = view.counts(session)
            failures = view.failed(session, limit=FAILED_LIMIT) if failed else []
        claimable = coordinator.backlog(name, cap=INSPECT_CAP)
        entry: dict[str, Any] = {
            "worker": name,
            "table": view.table.name,
            "concurrency": view.concurrency,
            "counts": {s.value: int(counts.get(s, 0)) for s in ExecutionStatus},
            "claimable": claimable,
            "claimable_capped": claimable >= INSPECT_CAP,
        }
        if failed:
            entry["failed"] = [{"id": sid, "error": error} for sid, error in failures]
        report.append(entry)
    return report


def cmd_inspect(options: Options, coordinator: Coordinator) -> int:
    workers = select_workers(coordinator, options)
    ping(coordinator)
    require_tables(coordinator, workers, options)
    try:
        report = inspect_report(coordinator, workers, failed=options["failed"])
    except CommandError:
        raise
    except Exception as exc:
        raise CommandError(f"reading work tables failed: {_one_line(exc)}", _db_code(exc)) from None
    if options["json"]:
        print(json.dumps({"workers": report}, default=str, indent=2))
        return EXIT_OK
    print(render_table(report))
    for entry in report:
        if "failed" in entry:
            print(
                f"\nfailed items of {entry['worker']} ({len(entry['failed'])}"
                f"{'+' if len(entry['failed']) >= FAILED_LIMIT else ''}):"
            )
            for item in entry["failed"]:
                print(f"  {item['id']}: {_first_line(item['error'])}")
    return EXIT_OK


def render_table(report: Sequence[Mapping[str, Any]]) -> str:
    """The plain-text table of ``inspect``."""
    header = ["WORKER", "WORKING", "UNFINISHED", "FINISHED", "FAILED", "CLAIMABLE"]
    rows = [header]
    for e in report:
        c = e["counts"]
        claimable = f"{e['claimable']}+" if e["claimable_capped"] else str(e["claimable"])
        rows.append(
            [
                e["worker"],
                str(c["working"]),
                str(c["unfinished"]),
                str(c["finished"]),
                str(c["failed"]),
                claimable,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def convert_id(raw: str, source: Any) -> Any:
    """``raw`` as the type of ``source``'s primary key (int, UUID or text)."""
    import sqlalchemy as sa

    column = sa.inspect(source).primary_key[0]
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return raw
    if python_type is int:
        try:
            return int(raw)
        except ValueError:
            raise CommandError(
                f"item ID {raw!r} is not an integer (the primary key of {source.__name__})"
            ) from None
    if python_type is uuid.UUID:
        try:
            return uuid.UUID(raw)
        except ValueError:
            raise CommandError(
                f"item ID {raw!r} is not a UUID (the primary key of {source.__name__})"
            ) from None
    return raw


def cmd_retry(options: Options, coordinator: Coordinator) -> int:
    (name,) = select_workers(coordinator, options)
    view = coordinator.workers[name]
    ids = [convert_id(raw, view.source) for raw in options.ids]
    ping(coordinator)
    require_tables(coordinator, [name], options)
    left: list[Any] = []
    try:
        with session_of(coordinator) as session:
            if options["all_failed"]:
                count = view.reset_all_failed(session)
            else:
                count = 0
                for source_id in ids:
                    if view.reset_failed(session, source_id):
                        count += 1
                    else:
                        left.append(source_id)
            session.commit()
    except CommandError:
        raise
    except Exception as exc:
        raise CommandError(
            f"resetting failed items failed: {_one_line(exc)}", _db_code(exc)
        ) from None
    print(f"reset {count} failed item(s) of worker {name!r}")
    if left:
        print(f"left alone (not failed): {', '.join(map(str, left))}", file=sys.stderr)
    return EXIT_OK


# --- entry point -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except CommandError as exc:
        return _fail(str(exc), exc.code)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_UNEXPECTED)
    except Exception as exc:  # one line for humans, the traceback at DEBUG
        log.debug("unexpected error", exc_info=True)
        return _fail(
            f"unexpected error: {_one_line(exc)} (--log-level DEBUG shows the traceback)",
            EXIT_UNEXPECTED,
        )


def _main(args: list[str]) -> int:
    from dbworker import logs
    from dbworker.pod import shutdown as shutdowns

    if not args:
        build_parser().print_help(sys.stderr)
        return EXIT_USAGE
    options = parse(args, os.environ)
    logs.setup(level=options["log_level"], fmt=options["log_format"].lower())
    shutdown = None
    if options.command == "run":
        # Installed before the application is imported, so an early SIGTERM is a clean stop.
        from dbworker.pod import health as _health  # noqa: F401 - fail fast if the pod extra is missing

        shutdown = shutdowns.Shutdown(drain_seconds=options["drain_seconds"])
        shutdown.install()
    coordinator = load_app(options.app)
    logs.mask(*_secrets_of(coordinator))
    if options.command == "run":
        return cmd_run(options, coordinator, shutdown)
    if options.command == "migrate":
        return cmd_migrate(options, coordinator)
    if options.command == "inspect":
        return cmd_inspect(options, coordinator)
    return cmd_retry(options, coordinator)


def _fail(message: str, code: int) -> int:
    from dbworker import logs

    line = "dbworker: " + redact.redact(message, logs.masked()).replace("\n", " ")
    print(line, file=sys.stderr, flush=True)
    write_termination_log(line)
    return code


def write_termination_log(line: str) -> None:
    """Put ``line`` where Kubernetes reads a container's last words, if that file is writable."""
    path = os.environ.get(TERMINATION_LOG_ENV) or TERMINATION_LOG
    # Only an existing file: creating /dev/termination-log outside Kubernetes helps nobody.
    if os.path.isfile(path) and os.access(path, os.W_OK):
        try:
            with open(path, "w") as f:
                f.write(line + "\n")
        except OSError:
            pass


def _secrets_of(coordinator: Coordinator) -> tuple[str, ...]:
    # The public database_url is already masked; the coordinator keeps the real secrets.
    secrets = getattr(coordinator, "_secrets", ())
    return tuple(str(s) for s in secrets)


def _db_code(exc: BaseException) -> int:
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return EXIT_DATABASE
    return EXIT_UNEXPECTED


def _one_line(exc: BaseException) -> str:
    from dbworker import logs

    return _first_line(redact.describe(exc, logs.masked()))


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= 300 else first[:297] + "..."


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("dbworker")
    except Exception:  # running from a checkout
        import dbworker

        return str(getattr(dbworker, "__version__", "unknown"))
