"""The claim loop's lookup (``attempts.lookup``): whether its worker is paused and which items
wait, in one statement, read every second by every idle loop. It answers as the two reads
it replaced did (``pauses.is_paused``, ``attempts.due``) whether or not items wait.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

import dbworker
from dbworker.sql import attempts, pauses
from tests.integration.conftest import App

WINDOW = 60.0  # seconds overdue at most, as the loop's lookup window


def test_the_lookup_reads_the_pause_and_the_waiting_items_as_the_two_reads_did(app: App) -> None:
    c = app.coordinator()
    w = c.workers["items"]
    table = w.table

    def both() -> tuple[tuple[bool, list[tuple[int, float]]], tuple[bool, list[tuple[int, float]]]]:
        with app.db.engine.connect() as conn:
            together = attempts.lookup(conn, table, "items", 64, overdue=WINDOW)
            with conn.begin():
                paused = pauses.is_paused(conn, "items")
            apart = (paused, attempts.due(conn, table, 64, overdue=WINDOW))
        return together, apart

    def check(paused: bool, ids: list[int]) -> None:
        together, apart = both()
        assert together[0] is paused and apart[0] is paused
        assert [sid for sid, _ in together[1]] == [sid for sid, _ in apart[1]] == ids
        for (_, a), (_, b) in zip(together[1], apart[1], strict=True):
            assert abs(a - b) < 5

    check(False, [])  # nothing waits, nothing paused: still one row for the pause
    with Session(app.db.engine) as s:
        assert w.pause(s, by="test")
        s.commit()
    check(True, [])
    # Waiting items (unfinished, due later or due now), one overdue past the window (left
    # out: the sweep finds it), and a finished one (no not_before).
    ids = app.add("finish", "finish", "finish", "finish", "finish")
    now = dbworker.now()
    due_at = {ids[0]: now + dt.timedelta(hours=2), ids[1]: now + dt.timedelta(seconds=30),
              ids[2]: now - dt.timedelta(seconds=5), ids[3]: now - dt.timedelta(hours=1)}  # fmt: skip
    with app.db.engine.begin() as conn:
        for sid, at in due_at.items():
            conn.execute(sa.insert(table).values(source_id=sid, execution_status="unfinished", attempts=0, not_before=at))
        conn.execute(sa.insert(table).values(source_id=ids[4], execution_status="finished", attempts=1))
    check(True, [ids[2], ids[1], ids[0]])  # soonest first
    with app.db.engine.connect() as conn:
        _, waiting = attempts.lookup(conn, table, "items", 64, overdue=WINDOW)
    seconds = dict(waiting)
    assert seconds[ids[2]] <= 0 < seconds[ids[1]] <= 30 < 7000 < seconds[ids[0]] <= 7200
    with Session(app.db.engine) as s:
        assert w.resume(s)
        s.commit()
    check(False, [ids[2], ids[1], ids[0]])
    with app.db.engine.connect() as conn:  # the limit is the waiting items', not the rows'
        assert [sid for sid, _ in attempts.lookup(conn, table, "items", 2, overdue=WINDOW)[1]] == [ids[2], ids[1]]
        # Another worker's pause is not this one's.
        with conn.begin():
            pauses.pause(conn, "other", by=None)
        assert attempts.lookup(conn, table, "items", 64, overdue=WINDOW)[0] is False
