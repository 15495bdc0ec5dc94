"""The option table of the ``dbworker`` command: flags, ``DBWORKER_*`` variables, ``--help``.

``OPTIONS`` feeds the parsers, the environment and the help text; the pure ``parse()`` turns
argv and the environment into checked ``Options`` (the flag wins over the variable) or raises
``termination.CommandError`` (exit 2). Checks that need the application's Coordinator are
``app``'s; what the commands do with the options is ``run``'s and ``admin``'s.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from dbworker import bounds, settings
from dbworker.console import tokens, tracelinks
from dbworker.pod import termination

ENV_PREFIX = "DBWORKER_"
APP_ENV = ENV_PREFIX + "APP"


@dataclass(frozen=True)
class Option:
    """One flag and its variable: how to parse it, which commands take it, its default."""

    flag: str
    kind: str  # str | int | float | bool | list | pairs
    help: str
    commands: tuple[str, ...]
    default: Any = None
    minimum: float | None = None
    maximum: bounds.Bound | None = None  # an upper bound of bounds.py, checked with its message
    positive: bool = False
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    variable: str | None = None  # the variable's name when it is not DBWORKER_<FLAG>

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env(self) -> str:
        return self.variable or ENV_PREFIX + self.dest.upper()


ALL = ("run", "migrate", "inspect", "retry", "cancel", "pause", "resume", "console")
OPTIONS: tuple[Option, ...] = (
    Option("--worker", "list", "run/show only this worker (repeatable; the variable takes a comma-separated list); default: all registered workers", ("run", "inspect", "retry", "cancel", "pause", "resume"), metavar="NAME"),
    Option("--concurrency", "pairs", "handler processes for worker NAME, overriding the code (repeatable; the variable takes a=2,b=3)", ("run",), metavar="NAME=N"),
    Option("--processes", "pairs", "handler processes carrying the --concurrency items of async worker NAME (default 1), overriding the code; a sync worker's must equal its concurrency (repeatable; the variable takes a=2,b=3)", ("run",), metavar="NAME=N"),
    Option("--metrics-port", "int", "port for /metrics, /healthz and /readyz; 0 turns the HTTP server off", ("run",), default=9100, minimum=0, metavar="PORT"),
    Option("--metrics-host", "str", "address the HTTP server listens on", ("run",), default="0.0.0.0", metavar="HOST"),
    Option("--drain-seconds", "float", "after SIGTERM/SIGINT, how long running handlers may finish before they are ended and their claims released", ("run",), default=25.0, minimum=0, maximum=bounds.SETTING, metavar="SECONDS"),
    Option("--create-tables", "bool", "create or upgrade the work tables before starting (like `dbworker migrate`)", ("run",), default=False),
    Option("--lease-seconds", "float", "claim lease, overriding the code", ("run",), positive=True, maximum=bounds.SETTING, metavar="SECONDS"),
    Option("--poll-seconds", "float", "first wait after finding nothing claimable, overriding the code", ("run",), positive=True, maximum=bounds.SETTING, metavar="SECONDS"),
    Option("--max-poll-seconds", "float", "longest wait between polls, overriding the code", ("run",), positive=True, maximum=bounds.SETTING, metavar="SECONDS"),
    Option("--backlog-seconds", "float", "how often dbworker_backlog is sampled; 0 turns sampling off", ("run",), default=15.0, minimum=0, maximum=bounds.SETTING, metavar="SECONDS"),
    Option("--no-wakeup-triggers", "bool", "leave the wake-up triggers off each source table, removing any there (they are installed by default, so new and changed rows wake workers at once instead of at their next poll)", ("migrate", "run"), default=False),
    Option("--notify-triggers", "bool", "install the wake-up triggers (the default; kept for scripts written for 0.1)", ("migrate",), default=False),
    Option("--failed", "bool", "also list failed items with their errors", ("inspect",), default=False),
    Option("--json", "bool", "print JSON instead of a table", ("inspect",), default=False),
    Option("--item", "str", "show one item of the one --worker: its state, progress and attempt history", ("inspect",), metavar="ID"),
    Option("--all-failed", "bool", "reset every failed item of the worker", ("retry",), default=False),
    Option("--port", "int", "port the console listens on", ("console",), default=8080, minimum=1, metavar="PORT"),
    Option("--host", "str", "address the console listens on; without a token only a loopback address is allowed", ("console",), default="127.0.0.1", metavar="HOST"),
    Option("--token", "list", "sign-in token, SECRET or NAME=SECRET (NAME is logged with each action); repeatable, the variable takes a comma-separated list", ("console",), metavar="TOKEN", variable="DBWORKER_CONSOLE_TOKEN"),
    Option("--read-only", "bool", "show no actions and refuse every action request", ("console",), default=False),
    Option("--trace-url", "str", "trace UI address with {trace_id} (and optionally {span_id}), e.g. http://jaeger:16686/trace/{trace_id}: each attempt on an item page links its trace; without it the ids are shown as text", ("console",), metavar="URL"),
    Option("--transaction-pooler", "bool", "the database URL goes through a transaction pooler (PgBouncer pool_mode=transaction): no prepared statements, and LISTEN only on --listen-url (else workers poll); overrides the code when given", ALL, default=None),
    Option("--listen-url", "str", "a direct PostgreSQL URL (not the pooler's) for the one connection that LISTENs for wake-ups; overrides the code", ("run",), metavar="URL"),
    Option("--log-format", "str", "log line format", ALL, default="text", choices=("text", "json")),
    Option("--log-level", "str", "log level", ALL, default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
)  # fmt: skip
COMMAND_HELP = {
    "run": "run the application's workers until SIGTERM/SIGINT",
    "migrate": "create or upgrade the work tables and exit (safe from many pods at once)",
    "inspect": "print per worker how many items are in each status and how many are claimable now",
    "retry": "reset failed items of one worker so they are claimed again",
    "cancel": "cancel items of one worker: they fail with the error 'cancelled' and running handlers end",
    "pause": "stop claiming for one worker in every pod (running handlers finish)",
    "resume": "resume claiming for a paused worker in every pod",
    "console": "serve the web console: workers, items, retry, cancel, pause (see docs/console.md)",
}
COMMANDS_TEXT = ", ".join(ALL)
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
    # argparse would print usage and exit 2 itself; the command's one-line error does that.
    def error(self, message: str) -> NoReturn:
        raise termination.CommandError(f"{message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser (for ``dbworker --help``); each command has its own below."""
    parser = _Parser(
        prog="dbworker",
        description="Run, migrate, inspect, retry, cancel and pause an application's dbworker workers, and serve their console.",
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
    if command == "cancel":
        p.add_argument("ids", nargs="*", metavar="ID", help="primary keys of the items to cancel")
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        shown = opt.default not in (None, False)
        text = f"{opt.help} [env {opt.env}" + (f"; default {show(opt.default)}]" if shown else "]")
        if opt.kind == "bool":
            p.add_argument(opt.flag, action="store_true", default=None, help=text)
        elif opt.kind in ("list", "pairs"):
            p.add_argument(opt.flag, action="append", default=None, metavar=opt.metavar, help=text)
        else:
            choices = "{" + ",".join(c.lower() for c in opt.choices) + "}" if opt.choices else None
            p.add_argument(opt.flag, default=None, metavar=opt.metavar or choices, help=text)
    return p


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Options:
    """Check ``argv`` and ``env`` into ``Options``.

    Raises ``termination.CommandError`` (exit 2) naming the fault; ``SystemExit(0)`` after
    printing ``--help``.
    """
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        build_parser().parse_args(argv)  # --help exits here; anything else is an error
        raise termination.CommandError(
            f"missing command; use one of {COMMANDS_TEXT} (see `dbworker --help`)"
        )
    command = argv[0]
    if command not in ALL:
        raise termination.CommandError(
            f"unknown command {command!r}; use one of {COMMANDS_TEXT} (see `dbworker --help`)"
        )
    # Intermixed, so item IDs may follow options: `retry app:c --worker w 1 2`.
    ns = command_parser(command).parse_intermixed_args(argv[1:])
    app = ns.app if ns.app is not None else env.get(APP_ENV, "").strip()
    if not app:
        raise termination.CommandError(
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
            raise termination.CommandError(
                "retry needs exactly one --worker NAME (the worker whose failed items to reset)"
            )
        if ids and values["all_failed"]:
            raise termination.CommandError("give either item IDs or --all-failed, not both")
        if not ids and not values["all_failed"]:
            raise termination.CommandError("nothing to retry: give failed item IDs or --all-failed")
    if command == "cancel":
        if len(values.get("worker") or []) != 1:
            raise termination.CommandError(
                "cancel needs exactly one --worker NAME (the worker whose items to cancel)"
            )
        if not ids:
            raise termination.CommandError("nothing to cancel: give the item IDs, e.g. `dbworker cancel app:c --worker w 7`")
    if command == "inspect" and values.get("item") is not None and len(values.get("worker") or []) != 1:
        raise termination.CommandError("inspect --item needs exactly one --worker NAME (the worker of the item)")
    if command in ("pause", "resume") and len(values.get("worker") or []) != 1:
        raise termination.CommandError(f"{command} needs exactly one --worker NAME (the worker to {command})")
    if command == "console":
        _check_console(values, sources)
    return Options(command=command, app=app, values=values, ids=ids, sources=sources)


def show(value: Any) -> str:
    """A value as a message shows it: ``25`` for 25.0, ``0.1`` for 0.1."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _convert(opt: Option, raw: Any, where: str) -> Any:
    if opt.kind == "bool":
        if raw is True:
            return True
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise termination.CommandError(f"{where}={raw!r} is not a boolean; use true or false")
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
                raise termination.CommandError(
                    f"{where} {text!r} is not one of {', '.join(c.lower() for c in opt.choices)}"
                )
            return match[0]
        if not text:
            raise termination.CommandError(f"{where} is empty; give a value")
        return text
    try:
        number: float = int(text) if opt.kind == "int" else float(text)
    except ValueError:
        what = "a whole number" if opt.kind == "int" else "a number"
        raise termination.CommandError(
            f"{where} {text!r} is not {what}; e.g. {_example(where, show(opt.default) if opt.default is not None else '5')}"
        ) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise termination.CommandError(f"{where} {text!r} is not a finite number")
    if opt.positive and number <= 0:
        raise termination.CommandError(f"{where} must be greater than 0, got {text}")
    if opt.minimum is not None and number < opt.minimum:
        raise termination.CommandError(f"{where} must be at least {show(opt.minimum)}, got {text}")
    if opt.maximum is not None and bounds.exceeds(number, opt.maximum):
        raise termination.CommandError(bounds.message(where, text, opt.maximum))
    if opt.flag == "--port" and number > 65535:
        raise termination.CommandError(f"{where} {text} is not a port; use 1-65535")
    if opt.flag == "--metrics-port" and number > 65535:
        raise termination.CommandError(
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
            raise termination.CommandError(
                f"malformed {where} {part!r}; expected NAME=N with N >= 1, e.g. {_example(where, 'hash=4')}"
            )
        if bounds.exceeds(n, bounds.CONCURRENCY):
            raise termination.CommandError(bounds.message(f"{where} {name}", n, bounds.CONCURRENCY))
        result[name] = n
    return result


def _check_poll_order(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    # Both given: checked here, before the application is imported. One given against the
    # code's value: app.apply_overrides checks it once the Coordinator is loaded.
    poll, max_poll = values.get("poll_seconds"), values.get("max_poll_seconds")
    if poll is not None and max_poll is not None:
        try:
            settings.check_order(poll, max_poll, poll_field=sources["poll_seconds"],
                                 max_field=sources["max_poll_seconds"])  # fmt: skip
        except ValueError as exc:
            raise termination.CommandError(str(exc)) from None


def _check_console(values: dict[str, Any], sources: Mapping[str, str]) -> None:
    """Tokens well formed; no token only on a loopback address. Secrets stay out of messages."""
    where = sources.get("token", "--token")
    try:
        values["token"] = tokens.parse(values.get("token") or [], where=where)
    except ValueError as exc:
        raise termination.CommandError(str(exc)) from None
    if values.get("trace_url") is not None:
        try:
            values["trace_url"] = tracelinks.check(values["trace_url"], where=sources.get("trace_url", "--trace-url"))
        except ValueError as exc:
            raise termination.CommandError(str(exc)) from None
    if not values["token"] and not tokens.is_loopback(values["host"]):
        raise termination.CommandError(
            f"the console needs a sign-in token to listen on {values['host']!r} "
            f"({sources.get('host', '--host')}): give --token or DBWORKER_CONSOLE_TOKEN, "
            "or listen on a loopback address such as 127.0.0.1"
        )


def _example(where: str, value: str) -> str:
    """How to write ``value`` for a flag (``--x 5``) or a variable (``DBWORKER_X=5``)."""
    return f"{where} {value}" if where.startswith("--") else f"{where}={value}"
