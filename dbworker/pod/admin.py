"""The one-shot commands: ``dbworker migrate``, ``inspect``, ``retry`` and ``cancel``; each prints and returns 0.

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
from dbworker.pod import app, termination
from dbworker.pod import options as opts
from dbworker.workers import WorkerView

INSPECT_CAP = 1000
FAILED_LIMIT = 100


def migrate(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Create or upgrade the work tables (and the wake-up triggers if asked); exit 0."""
    app.ping(coordinator)
    try:
        coordinator.upgrade_worker_tables()
        triggers = coordinator.install_notify_triggers() if options["notify_triggers"] else []
    except Exception as exc:
        raise termination.CommandError(
            f"migrating work tables failed: {termination.one_line(exc)}",
            termination.database_code(exc),
        ) from None
    tables = [coordinator.workers[name].table.name for name in coordinator.workers]
    print(f"work tables up to date: {', '.join(tables) or '(no workers)'}")
    if options["notify_triggers"]:
        print(f"wake-up triggers: {', '.join(triggers) or 'none (not PostgreSQL: workers poll)'}")
    return termination.EXIT_OK


def inspect(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Print the ``inspect_report`` as a table (or JSON); exit 0."""
    workers = app.select_workers(coordinator, options)
    app.ping(coordinator)
    app.require_tables(coordinator, workers, options)
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
    print(render_table(report))
    for entry in report:
        if "failed" in entry:
            print(
                f"\nfailed items of {entry['worker']} ({len(entry['failed'])}"
                f"{'+' if len(entry['failed']) >= FAILED_LIMIT else ''}):"
            )
            for item in entry["failed"]:
                print(f"  {item['id']}: {termination.first_line(item['error'])}")
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
        claimable = coordinator.backlog(name, cap=INSPECT_CAP)
        entry: dict[str, Any] = {
            "worker": name,
            "table": view.table.name,
            "concurrency": view.concurrency,
            "counts": {s.value: int(counts.get(s, 0)) for s in dbworker.ExecutionStatus},
            "claimable": claimable,
            "claimable_capped": claimable >= INSPECT_CAP,
        }
        if failed:
            entry["failed"] = [{"id": sid, "error": error} for sid, error in failures]
        report.append(entry)
    return report


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
    ids = [app.convert_id(raw, view.source) for raw in options.ids]
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
        print(f"left alone ({left_alone}): {', '.join(map(str, left))}", file=sys.stderr)
    return termination.EXIT_OK
