"""A running handler's progress: the latest ``dbworker.report_progress()`` on its work record.

Written on a connection of its own, committed at once (outside the handler's transaction,
so it is seen before the outcome commits and survives a rollback), fenced on the claim so a
handler that lost its claim writes nothing. Kept after the attempt ends (the last report).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from dbworker.sql import dialects
from dbworker.sql.states import WORKING, fence
from dbworker.sql.tables import PROGRESS_NOTE_CHARS

COLUMNS = ("progress_fraction", "progress_note", "progress_at")


def clip_note(note: str | None) -> str | None:
    """``note`` cut to what ``progress_note`` keeps."""
    if note is not None and len(note) > PROGRESS_NOTE_CHARS:
        return note[: PROGRESS_NOTE_CHARS - 3] + "..."
    return note


def write(conn: Connection, table: sa.Table, source_id: Any, token: str, *, fraction: float | None,
          note: str | None) -> bool:  # fmt: skip
    """Store a report if the claim ``token`` is still current; commits. True if stored."""
    values = {"progress_fraction": fraction, "progress_note": clip_note(note), "progress_at": dialects.of(conn).now()}
    stored = conn.execute(dialects.update_by_key(table).where(fence(table, source_id, token)).values(**values)).rowcount == 1
    conn.commit()
    return bool(stored)


def take(state: dict[str, Any]) -> dict[str, Any] | None:
    """Move the progress columns of a work record (a mapping) into one ``progress`` mapping
    (``fraction``, ``note``, ``at``), None when nothing was ever reported."""
    fraction, note, at = (state.pop(name, None) for name in COLUMNS)
    if at is None:
        return None
    return {"fraction": fraction, "note": note, "at": at}


def summary(session: Session, table: sa.Table) -> tuple[int, float | None]:
    """Items WORKING now that reported a fraction, and their mean fraction (None if none):
    read through the ``execution_status`` index, so it costs the running items only."""
    w = table.c
    count, mean = session.execute(
        sa.select(sa.func.count(), sa.func.avg(w.progress_fraction)).where(
            w.execution_status == WORKING, w.progress_fraction.is_not(None)
        )
    ).one()
    return int(count or 0), None if mean is None else float(mean)

