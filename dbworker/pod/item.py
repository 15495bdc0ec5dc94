"""``dbworker inspect APP --worker W --item ID``: one item's state, progress and attempts.

Reads ``workers[W].state()`` and renders it as text (one line per attempt, oldest first,
each error's first line) or, with ``--json``, as JSON with the whole record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import orm

import dbworker
from dbworker.pod import app, termination
from dbworker.pod import options as opts


def show(options: opts.Options, coordinator: dbworker.Coordinator) -> int:
    """Print the item's state (or JSON); ``CommandError`` (exit 2) if it has no record."""
    name = options["worker"][0]
    view = coordinator.workers[name]
    source_id = app.convert_id(options["item"], view.source)
    try:
        with orm.Session(coordinator.engine) as session:
            state = view.state(session, source_id)
    except Exception as exc:
        raise termination.CommandError(
            f"reading item {source_id!r} failed: {termination.one_line(exc)}", termination.database_code(exc)
        ) from None
    if state is None:
        raise termination.CommandError(f"worker {name}: item {source_id!r} has no work record (never claimed)")
    if options["json"]:
        print(json.dumps({"worker": name, "item": state}, default=str, indent=2))
    else:
        print(render(name, source_id, state))
    return termination.EXIT_OK


def render(worker: str, source_id: Any, state: Mapping[str, Any]) -> str:
    """The item as text: status, attempts of the step, progress, then its history (each
    attempt's log records below it)."""
    lines = [
        f"worker {worker}, item {source_id!r}: {state['execution_status'].value}, "
        f"attempt {state.get('attempts', 0)} of the current step",
    ]
    if state.get("error"):
        lines.append(f"  error: {termination.first_line(state['error'])}")
    progress = state.get("progress")
    if progress is not None:
        fraction = "" if progress["fraction"] is None else f"{progress['fraction']:.0%} "
        note = progress["note"] or ""
        lines.append(f"  progress: {fraction}{note} (at {progress['at']})".replace("  (", " ("))
    history = state.get("history") or []
    lines.append(f"history ({len(history)} attempts kept, oldest first):")
    for attempt in history:
        error = f": {termination.first_line(attempt['error'])}" if attempt.get("error") else ""
        lines.append(
            f"  {attempt['started_at'] or '?'} .. {attempt['ended_at']}  {attempt['outcome']:<10} "
            f"on {attempt['claimed_by'] or '?'}{error}"
            + (f"  trace {attempt['trace_id']}" if attempt.get("trace_id") else "")
        )
        for record in attempt.get("logs") or []:  # its log records, one line each
            lines.append(f"    {record.get('at')} {record.get('level')} {record.get('logger')}: "
                         f"{termination.first_line(record.get('message'))}")  # fmt: skip
    return "\n".join(lines)
