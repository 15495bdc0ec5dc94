"""The ``dbworker`` command's entry point: parse, set up logging, load the application, dispatch.

Every failure ends here in one line on stderr (``dbworker: <message>``), the same line with
its reason token in the termination log (``dbworker[<Reason>]: <message>``) and its exit
code; ``termination`` holds those codes, tokens and ``CommandError``. Options are
``options``' job, the application ``app``'s, the commands ``run``'s and ``admin``'s (the
web console ``dbworker.console``'s).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

import dbworker
from dbworker import logs
from dbworker.pod import admin, app, termination
from dbworker.pod import options as opts
from dbworker.pod import shutdown as shutdowns

log = logging.getLogger("dbworker.cli")  # the command's logger name (log lines show it)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; returns the exit code (0 done, 1 unexpected, 2 bad input, 3 database)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except termination.CommandError as exc:
        return _fail(str(exc), exc.code, exc.reason)
    except KeyboardInterrupt:
        return _fail("interrupted", termination.EXIT_UNEXPECTED, termination.UNEXPECTED)
    except Exception as exc:  # one line for humans, the traceback at DEBUG
        log.debug("unexpected error", exc_info=True)
        return _fail(
            f"unexpected error: {termination.one_line(exc)} (--log-level DEBUG shows the traceback)",
            termination.EXIT_UNEXPECTED,
            termination.UNEXPECTED,
        )


def _main(args: list[str]) -> int:
    if not args:
        opts.build_parser().print_help(sys.stderr)
        return termination.EXIT_USAGE
    options = opts.parse(args, os.environ)
    logs.setup(level=options["log_level"], fmt=options["log_format"].lower())
    if options.command == "run":
        return _run(options)
    coordinator = _load(options)
    if options.command == "console":
        return _console(options, coordinator)
    if options.command == "pause":
        return admin.pause(options, coordinator)
    if options.command == "resume":
        return admin.resume(options, coordinator)
    if options.command == "migrate":
        return admin.migrate(options, coordinator)
    if options.command == "inspect":
        return admin.inspect(options, coordinator)
    if options.command == "cancel":
        return admin.cancel(options, coordinator)
    return admin.retry(options, coordinator)


def _run(options: opts.Options) -> int:
    # Installed before the application is imported, so an early SIGTERM is a clean stop.
    shutdown = shutdowns.Shutdown(drain_seconds=options["drain_seconds"])
    shutdown.install()
    coordinator = _load(options)
    # Imported here, not at the top: run needs the `pod` extra (prometheus_client), and
    # migrate, inspect and retry must work without it.
    from dbworker.pod import run

    return run.command(options, coordinator, shutdown)


def _console(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    logs.mask(*options["token"].values())  # sign-in secrets never reach a log line
    try:
        # Imported here: the console needs the `console` extra (FastAPI, Jinja2, itsdangerous).
        from dbworker.console import server
    except ImportError as exc:
        raise termination.CommandError(
            f"the console needs the console extra ({termination.one_line(exc)}); "
            "install it with `pip install 'dbworker[console]'`"
        ) from None
    app.ping(coordinator)
    app.require_tables(coordinator, list(coordinator.workers), options)
    config = server.Config(
        host=options["host"], port=options["port"], tokens=options["token"], read_only=options["read_only"],
        trace_url=options["trace_url"],
    )
    try:
        return server.serve(coordinator, config)
    except ValueError as exc:
        raise termination.CommandError(str(exc)) from None


def _load(options: opts.Options) -> dbworker.Coordinator:
    coordinator = app.load_app(options.app)
    app.apply_pooler(coordinator, options)  # before anything connects
    # The public database_url is masked already; these are the real secrets.
    logs.mask(*coordinator.secrets)
    return coordinator


def _fail(message: str, code: int, reason: str) -> int:
    print(termination.stderr_line(message), file=sys.stderr, flush=True)
    termination.write(termination.termination_line(message, reason))
    return code
