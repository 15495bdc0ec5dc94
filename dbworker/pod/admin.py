"""The one-shot commands: ``dbworker migrate``, ``inspect``, ``retry``, ``cancel``, ``pause`` and
``resume``; each prints and returns 0.

They act on an already loaded Coordinator (``app`` loads and checks it) and need no pod
extra. Schema steps are the Coordinator's, status reads and resets its worker views'; this
module only calls them and renders the result. Failures are ``termination.CommandError``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import orm

import dbworker
from dbworker import redact
from dbworker.pod import app, termination
from dbworker.pod import item as item_command
from dbworker.pod import options as opts
from dbworker.workers import WorkerView

INSPECT_CAP = 1000
FAILED_LIMIT = 100


def migrate(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Create or upgrade the work tables and the wake-up triggers (unless opted out); exit 0."""
    app.ping(coordinator)
    if options["no_wakeup_triggers"] and options["notify_triggers"]:
        raise termination.CommandError("--no-wakeup-triggers and --notify-triggers contradict each other; pass one")
    wanted = not options["no_wakeup_triggers"]
    try:
        coordinator.upgrade_worker_tables(wakeup_triggers=wanted)
    except Exception as exc:
        raise termination.CommandError(
            f"migrating work tables failed: {termination.one_line(exc)}",
            termination.database_code(exc),
        ) from None
    tables = [coordinator.workers[name].table.name for name in coordinator.workers]
    print(f"work tables up to date: {', '.join(tables) or '(no workers)'}")
    print("wake-up triggers: " + ("on every source table" if wanted else "none (workers poll)"))
    for name in coordinator.workers:
        with orm.Session(coordinator.engine) as session:
            create = coordinator.workers[name].missing_due_index(session)
        if create is not None:
            print(f"worker {name}: no index starts with its due column (the due-time lookup reads "
                  f"one every second); create it: {create}", file=sys.stderr)  # fmt: skip
    return termination.EXIT_OK


def inspect(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Print the ``inspect_report`` as a table (or JSON); exit 0."""
    workers = app.select_workers(coordinator, options)
    app.ping(coordinator)
    app.require_tables(coordinator, workers, options)
    if options["item"] is not None:
        return item_command.show(options, coordinator)
    try:
        report = inspect_report(coordinator, workers, failed=options["failed"])
    except termination.CommandError:
        raise
    except Exception as exc:
        raise termination.CommandError(
            f"reading work tables failed: {termination.one_line(exc)}",
            termination.database_code(exc),
        ) from None
    if options["json"]:
        print(json.dumps({"workers": report}, default=str, indent=2))
        return termination.EXIT_OK
    # Errors and keys come from handlers and applications: shown with control characters escaped.
    print(redact.printable(render_table(report)))
    keys = render_limit_keys(report)
    if keys:
        print(redact.printable(f"\nkeys waiting on a limit (most first):\n{keys}"))
    asynchronous = render_async(report)
    if asynchronous:
        print(f"\nasync workers:\n{asynchronous}")
    schedules = render_schedules(report)
    if schedules:
        print(redact.printable(f"\nschedules:\n{schedules}"))
    for entry in report:
        if "failed" in entry:
            print(
                f"\nfailed items of {entry['worker']} ({len(entry['failed'])}"
                f"{'+' if len(entry['failed']) >= FAILED_LIMIT else ''}):"
            )
            for item in entry["failed"]:
                print(redact.printable(f"  {item['id']}: {termination.first_line(item['error'])}"))
    return termination.EXIT_OK


def inspect_report(
    coordinator: dbworker.Coordinator, workers: Sequence[str], *, failed: bool
) -> list[dict[str, Any]]:
    """Per worker: counts by status, claimable now (capped), and failed items if asked."""
    report = []
    for name in workers:
        view = coordinator.workers[name]
        with orm.Session(coordinator.engine) as session:
            counts = view.counts(session)
            failures = view.failed(session, limit=FAILED_LIMIT) if failed else []
            paused = view.paused(session)
            schedule = view.schedule(session)
        claimable = coordinator.backlog(name, cap=INSPECT_CAP)
        waiting = view.waiting_on_limit(coordinator.engine, cap=INSPECT_CAP)
        entry: dict[str, Any] = {
            "worker": name,
            "table": view.table.name,
            "concurrency": view.concurrency,
            "processes": view.processes,
            "async": view.asynchronous,
            "paused": paused,
            "counts": {s.value: int(counts.get(s, 0)) for s in dbworker.ExecutionStatus},
            "claimable": claimable,
            "claimable_capped": claimable >= INSPECT_CAP,
        }
        if waiting is not None:  # a worker with limits (docs/limits.md)
            entry["waiting_on_limit"] = waiting.count
            entry["waiting_on_limit_capped"] = waiting.capped
            entry["limit_keys"] = [{"key": k.key, "waiting": k.waiting, "held": k.held} for k in waiting.keys]
        if schedule is not None:
            entry["schedule"] = schedule
        if failed:
            entry["failed"] = [{"id": sid, "error": error} for sid, error in failures]
        report.append(entry)
    return report


def _on_limit(e: Mapping[str, Any]) -> str:
    """The ON-LIMIT cell: items waiting only on a limit ("-": the worker has no limits)."""
    if "waiting_on_limit" not in e:
        return "-"
    return f"{e['waiting_on_limit']}{'+' if e['waiting_on_limit_capped'] else ''}"


def render_limit_keys(report: Sequence[Mapping[str, Any]]) -> str:
    """One line per worker with items waiting on a limit: the keys most behind, with how many
    wait and the slots they hold."""
    return "\n".join(
        f"  {e['worker']}: " + ", ".join(f"{k['key']!r} {k['waiting']} waiting, {k['held']} held" for k in e["limit_keys"])
        for e in report if e.get("limit_keys")
    )


def render_schedules(report: Sequence[Mapping[str, Any]]) -> str:
    """One line per periodic worker of ``inspect``: its schedule, next due time, last result."""
    lines = []
    for e in report:
        s = e.get("schedule")
        if s is None:
            continue
        last = s["last"]
        result = "none yet" if last is None else (
            f"tick {last['tick']} due {last['due_at']:%Y-%m-%d %H:%M:%S} {last['execution_status']}"
            + (f": {termination.first_line(last['error'])}" if last["error"] else "")
        )
        due = "never" if s["next_due_at"] is None else f"{s['next_due_at']:%Y-%m-%d %H:%M:%S} UTC"
        lines.append(f"  {e['worker']}: {s['schedule']}; next due {due}; last {result}")
    return "\n".join(lines)


def render_async(report: Sequence[Mapping[str, Any]]) -> str:
    """One line per async worker of ``inspect``: its items at once and the processes carrying them."""
    return "\n".join(
        f"  {e['worker']}: {e['concurrency']} coroutines in {e['processes']} handler "
        f"process{'' if e['processes'] == 1 else 'es'} per pod"
        for e in report if e.get("async")
    )


def render_table(report: Sequence[Mapping[str, Any]]) -> str:
    """The plain-text table of ``inspect``."""
    header = ["WORKER", "WORKING", "UNFINISHED", "FINISHED", "FAILED", "CLAIMABLE", "ON-LIMIT", "PAUSED"]
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
                _on_limit(e),
                "yes" if e.get("paused") else "",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def retry(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Reset the given (or all) failed items of one worker; ids not failed go to stderr; exit 0."""
    return _each_item(
        options, coordinator,
        act=lambda view, session, source_id: view.reset_failed(session, source_id),
        every=(lambda view, session: view.reset_all_failed(session)) if options["all_failed"] else None,
        doing="resetting failed items", done="reset {count} failed item(s)", left_alone="not failed",
    )  # fmt: skip


def cancel(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Cancel the given items of one worker; ids already finished or failed go to stderr; exit 0."""
    return _each_item(
        options, coordinator,
        act=lambda view, session, source_id: view.cancel(session, source_id),
        every=None, doing="cancelling items", done="cancelled {count} item(s)",
        left_alone="finished or failed already",
    )  # fmt: skip


def pause(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Pause the one ``--worker`` in every pod (recorded as paused by ``cli``); exit 0."""
    return _pause_state(options, coordinator, pause=True)


def resume(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Resume the one ``--worker`` in every pod; exit 0."""
    return _pause_state(options, coordinator, pause=False)


def _pause_state(options: opts.Options, coordinator: dbworker.Coordinator, *, pause: bool) -> int:
    (name,) = app.select_workers(coordinator, options)
    view = coordinator.workers[name]
    app.ping(coordinator)
    app.require_tables(coordinator, [name], options)
    try:
        with orm.Session(coordinator.engine) as session:
            changed = view.pause(session, by="cli") if pause else view.resume(session)
            session.commit()
    except Exception as exc:
        raise termination.CommandError(
            f"{'pausing' if pause else 'resuming'} worker {name!r} failed: {termination.one_line(exc)}",
            termination.database_code(exc),
        ) from None
    if pause:
        print(f"worker {name!r} {'paused' if changed else 'was paused already'}: every pod stops claiming for it within a second; running handlers finish")
    else:
        print(f"worker {name!r} {'resumed' if changed else 'was not paused'}")
    return termination.EXIT_OK


def _each_item(
    options: opts.Options,
    coordinator: dbworker.Coordinator,
    *,
    act: Callable[[WorkerView, orm.Session, Any], bool],
    every: Callable[[WorkerView, orm.Session], int] | None,
    doing: str,
    done: str,
    left_alone: str,
) -> int:
    """``act`` on each given item of the one ``--worker`` (or ``every`` at once) in one
    transaction; print how many it changed, and on stderr the ids it left alone.
    """
    (name,) = app.select_workers(coordinator, options)
    view = coordinator.workers[name]
    ids = [app.convert_id(raw, view.source, coordinator.engine.dialect) for raw in options.ids]
    app.ping(coordinator)
    app.require_tables(coordinator, [name], options)
    left: list[Any] = []
    try:
        with orm.Session(coordinator.engine) as session:
            if every is not None:
                count = every(view, session)
            else:
                count = 0
                for source_id in ids:
                    if act(view, session, source_id):
                        count += 1
                    else:
                        left.append(source_id)
            session.commit()
    except Exception as exc:
        raise termination.CommandError(
            f"{doing} failed: {termination.one_line(exc)}", termination.database_code(exc)
        ) from None
    print(f"{done.format(count=count)} of worker {name!r}")
    if left:
        print(redact.printable(f"left alone ({left_alone}): {', '.join(map(str, left))}"), file=sys.stderr)
    return termination.EXIT_OK
