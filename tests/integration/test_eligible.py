"""The eligible query: filters and ordering honoured; dbworker excludes done and claimed rows."""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus, tuning
from dbworker.observe import Observer
from dbworker.sql import claims, dialects, notify
from tests import pooler
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App


class EmptyPolls(Observer):
    """Notes claims that found nothing: a worker has polled once and now waits."""

    def __init__(self) -> None:
        self.seen = 0

    def claimed(self, worker: str, *, count: int, taken_over: int, seconds: float) -> None:
        if count == 0:
            self.seen += 1


def _register_second(c: Any) -> None:
    """A worker "second" that takes an item once worker "items" finished it."""

    def after_items() -> sa.Select[Any]:
        return sa.select(basic.Item).where(
            c.has_execution_status(worker="items", source_id=basic.Item.id, statuses=[ExecutionStatus.FINISHED])
        )

    c.transactional_worker(name="second", source=basic.Item, eligible=after_items)(basic.handle)


def test_filters_are_honoured(app: App) -> None:
    c = app.coordinator(eligible=basic.ready_items)
    [held] = app.add("finish", ready=False)
    [go] = app.add("finish")
    c.start()
    app.wait_status([go])
    assert app.status(held) is None
    assert c.backlog("items") == 0
    app.update_item(held, ready=True)
    app.wait_status([held], (ExecutionStatus.FINISHED,))


def test_first_claimable_row_in_the_query_order_is_taken(app: App) -> None:
    c = app.coordinator(eligible=basic.ready_items, concurrency=1)
    low = app.add(*["sleep:0"] * 3, priority=1)
    high = app.add(*["sleep:0"] * 3, priority=5)
    c.start()
    app.wait_status(low + high)
    order = [s.item_id for s in sorted(app.started(), key=lambda s: (s.at, s.id))]
    assert order == high + low


def test_backlog_counts_claimable_items_up_to_a_cap(app: App) -> None:
    c = app.coordinator(eligible=basic.ready_items)
    app.add(*["finish"] * 7)
    app.add("finish", ready=False)
    assert c.backlog("items") == 7
    assert c.backlog("items", cap=3) == 3


def test_has_execution_status_makes_one_worker_wait_for_another(app: App) -> None:
    c = app.coordinator()
    _register_second(c)
    c.create_worker_tables()
    [a, b] = app.add("dbwait", "finish")
    c.start()
    app.wait_status([b])
    wait_until(lambda: app.started(a), what="item a to start")
    def second(item: int) -> ExecutionStatus | None:
        with Session(app.db.engine) as s:
            return c.execution_status(s, worker="second", source_id=item)

    wait_until(lambda: second(b) is ExecutionStatus.FINISHED, what="the dependent worker to finish item b")
    assert second(a) is None  # still waits for "items" to finish a
    app.update_item(a, release=True)
    wait_until(lambda: second(a) is ExecutionStatus.FINISHED, what="the dependent worker to finish item a")


def test_has_execution_status_with_values_and_columns(app: App) -> None:
    c = app.coordinator(eligible=basic.ready_items)
    ids = app.add("finish", "fail", "finish")
    [never] = app.add("finish", ready=False)
    c.start()
    app.wait_status(ids)
    c.stop()
    with Session(app.db.engine) as s:
        finished = c.has_execution_status(worker="items", source_id=basic.Item.id, statuses=[ExecutionStatus.FINISHED])
        assert s.scalars(sa.select(basic.Item.id).where(finished).order_by(basic.Item.id)).all() == [ids[0], ids[2]]
        one = c.has_execution_status(worker="items", source_id=ids[1], statuses=["failed", ExecutionStatus.WORKING])
        assert s.scalar(sa.select(one)) in (True, 1)
        empty = c.has_execution_status(worker="items", source_id=ids[1], statuses=[])
        assert s.scalar(sa.select(sa.func.count()).select_from(basic.Item).where(empty)) == 0
        unclaimed = c.has_execution_status(worker="items", source_id=never, statuses=list(ExecutionStatus))
        assert s.scalar(sa.select(unclaimed)) in (False, 0)


def test_a_new_row_wakes_workers_without_polling(app: App) -> None:
    """Out of the box a new row is claimed long before the next poll: create_worker_tables()
    put the wake-up triggers on the source table (PostgreSQL: LISTEN/NOTIFY; elsewhere the
    change table, read every 20 ms on MySQL/MariaDB and at each commit seen on SQLite)."""
    # Polls come only every 120 s: only a wake-up can have the worker claim in time.
    c = app.coordinator(poll_seconds=120, max_poll_seconds=120)
    assert c.install_notify_triggers() == []  # already there, and left alone
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen, what="the first, empty poll")
    [i] = app.add("finish")
    app.wait_status([i], (ExecutionStatus.FINISHED,), timeout=60)


def test_without_wakeup_triggers_workers_poll(app: App) -> None:
    """The opt-out removes the triggers (and only dbworker's): a new row then waits for a poll."""
    c = app.coordinator(poll_seconds=0.05, max_poll_seconds=0.5)
    changes = c.upgrade_worker_tables(wakeup_triggers=False)
    assert any(change.startswith("removed") for change in changes)
    assert not any(change.startswith("removed") for change in c.upgrade_worker_tables(wakeup_triggers=False))
    c.start()
    [i] = app.add("finish")
    app.wait_status([i], (ExecutionStatus.FINISHED,), timeout=60)
    assert any("trigger" in change for change in c.install_notify_triggers())  # back again


def test_sqlite_commits_are_seen_through_file_events(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite on Linux: the commit watcher sleeps until the kernel reports a write to the
    database's files, instead of reading data_version every few tens of milliseconds."""
    if app.db.backend != "sqlite" or not sys.platform.startswith("linux"):
        pytest.skip("inotify watches SQLite's files on Linux")
    # The watcher's own readings every 120 s, polls too: only a file event is in time.
    for setting in ("FIRST_INTERVAL", "MAX_INTERVAL", "EVENTS_FALLBACK_SECONDS"):
        monkeypatch.setattr(tuning, setting, 120.0)
    c = app.coordinator(poll_seconds=120, max_poll_seconds=120)
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen, what="the first, empty poll")
    for _ in range(5):
        # Checkpointed first, so the insert may restart the WAL (data_version then changes
        # a moment before the commit is visible, and the watcher must look again).
        with app.db.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(FULL)").all()
        [i] = app.add("finish")
        app.wait_status([i], (ExecutionStatus.FINISHED,), timeout=60)


def test_the_trigger_notifies_once_per_statement_naming_its_rows(app: App) -> None:
    """PostgreSQL: a statement's rows in one notification; over 64 are named by the table alone
    (a bulk insert of a million rows must not queue a million notifications per pod). The
    row trigger of an earlier build is replaced."""
    if app.db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY exists on PostgreSQL only; other servers poll")
    c = app.coordinator(work_tables=False)
    with app.db.engine.begin() as conn:  # the row trigger of an earlier build: replaced below
        conn.exec_driver_sql(
            "CREATE FUNCTION dbworker_notify_items() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "PERFORM pg_notify('dbworker', TG_TABLE_NAME || ' ' || NEW.id::text); RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER dbworker_notify AFTER INSERT OR UPDATE ON items "
            "FOR EACH ROW EXECUTE FUNCTION dbworker_notify_items()"
        )
    c.install_notify_triggers()
    raw = pooler.direct_engine(app.db.url).raw_connection()  # LISTEN needs the server itself
    try:
        listener = raw.driver_connection
        listener.autocommit = True  # type: ignore[union-attr]
        listener.execute("LISTEN dbworker")  # type: ignore[union-attr]
        insert = sa.text(
            "INSERT INTO items (id, action, runs, ready, release, priority) "
            "SELECT g, 'finish', 0, true, false, 0 FROM generate_series(CAST(:first AS integer), CAST(:last AS integer)) AS g"
        )
        with app.db.engine.begin() as conn:
            conn.execute(insert, {"first": 1, "last": 3})
        with app.db.engine.begin() as conn:
            conn.execute(insert, {"first": 10, "last": 109})
        with app.db.engine.begin() as conn:
            conn.execute(sa.update(basic.Item).where(basic.Item.id == 999).values(ready=False))  # no row
            conn.execute(sa.update(basic.Item).where(basic.Item.id == 2).values(ready=False))
        notes = listener.notifies(timeout=30, stop_after=3)  # type: ignore[union-attr]
        changes = [notify.source_change(n.payload, "items") for n in notes]
    finally:
        raw.close()
    assert [(changed, sorted(keys, key=int)) for changed, keys in changes] == [
        (True, ["1", "2", "3"]),
        (True, []),  # 100 rows: the loops sweep
        (True, ["2"]),  # the update that changed nothing sent nothing
    ]


def _ready_in_no_order() -> sa.Select[Any]:
    # No ORDER BY: claimed by a key-order sweep whose cursor passes rows that are not ready.
    return sa.select(basic.Item).where(basic.Item.ready.is_(True))


@pytest.mark.parametrize("enabled", [1, 100], ids=["one-row", "bulk-update"])
def test_rows_enabled_behind_the_sweep_are_claimed_at_once(app: App, enabled: int) -> None:
    """A row made eligible below the sweep's cursor is claimed at its wake-up, not the next wrap.

    The wake-up triggers (installed by default) name the row: PostgreSQL's notification,
    the change table elsewhere; more than the loop takes by key at once (a bulk update)
    make it sweep from the start instead.
    """
    # Polls and wraps only every 120 s: only a wake-up can find the rows in time.
    c = app.coordinator(eligible=_ready_in_no_order, poll_seconds=120, max_poll_seconds=120)
    waiting = app.add(*["finish"] * enabled, ready=False)
    c.start()
    [ahead] = app.add("finish")  # a higher key: the sweep's cursor passes the waiting rows
    app.wait_status([ahead], (ExecutionStatus.FINISHED,), timeout=60)
    with Session(app.db.engine) as s:
        s.execute(sa.update(basic.Item).where(basic.Item.id.in_(waiting)).values(ready=True))
        s.commit()
    app.wait_status(waiting, (ExecutionStatus.FINISHED,), timeout=60)


def test_a_row_inserted_below_the_sweep_is_claimed_at_once(app: App) -> None:
    """Every row eligible (on PostgreSQL the one-statement claim): a key lower than the cursor's."""
    c = app.coordinator(poll_seconds=120, max_poll_seconds=120)
    c.start()
    with Session(app.db.engine) as s:
        s.add(basic.Item(id=1000, action="finish"))
        s.commit()
    app.wait_status([1000], (ExecutionStatus.FINISHED,), timeout=60)
    with Session(app.db.engine) as s:  # keys need not grow (think of UUIDs)
        s.add(basic.Item(id=7, action="finish"))
        s.commit()
    app.wait_status([7], (ExecutionStatus.FINISHED,), timeout=60)


def test_dependent_worker_of_another_coordinator_wakes_when_the_item_it_waits_for_ends(app: App) -> None:
    """PostgreSQL: "items" ends an item in one coordinator; "second" in another claims it at once."""
    if app.db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY exists on PostgreSQL only; other servers poll")
    first = app.coordinator()
    _register_second(first)
    first.create_worker_tables()
    # Polls only every 120 s: only the "done" announcement can wake the dependent worker in time.
    waiting = app.coordinator(poll_seconds=120, max_poll_seconds=120)
    _register_second(waiting)
    polls = EmptyPolls()
    waiting.add_observer(polls)
    waiting.start(workers=["second"])
    wait_until(lambda: polls.seen, what="the dependent worker's first, empty poll")
    [i] = app.add("finish")
    first.start(workers=["items"])
    app.wait_status([i], (ExecutionStatus.FINISHED,))

    def second() -> ExecutionStatus | None:
        with Session(app.db.engine) as s:
            return waiting.execution_status(s, worker="second", source_id=i)

    wait_until(lambda: second() is ExecutionStatus.FINISHED, timeout=60, what="the dependent worker to finish the item")


@pytest.mark.parametrize("where", ["same-coordinator", "other-coordinator"])
def test_a_dependent_row_behind_the_sweep_is_claimed_when_what_it_waits_for_ends(app: App, where: str) -> None:
    """Items that end out of key order still wake their dependents at once.

    "items" ends the higher key first, so "second" claims it and its sweep's cursor passes
    the lower key; when that one ends, the wake-up names it and "second" claims it by key
    (PostgreSQL), or the wake-up names nothing and "second" looks behind its cursor.
    """
    if where == "other-coordinator" and app.db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY exists on PostgreSQL only; other servers poll")
    # Polls and wraps only every 120 s: only a wake-up naming the row finds it in time.
    slow_poll = {"poll_seconds": 120, "max_poll_seconds": 120}
    first = app.coordinator(**slow_poll)
    _register_second(first)
    first.create_worker_tables()
    waiting = first
    if where == "other-coordinator":
        waiting = app.coordinator(**slow_poll)
        _register_second(waiting)
    lower, higher = app.add("sleep:2", "finish")

    def second(item: int) -> ExecutionStatus | None:
        with Session(app.db.engine) as s:
            return waiting.execution_status(s, worker="second", source_id=item)

    if waiting is first:
        first.start()
    else:
        polls = EmptyPolls()
        waiting.add_observer(polls)
        waiting.start(workers=["second"])
        wait_until(lambda: polls.seen, what="the dependent worker's first, empty poll")
        first.start(workers=["items"])
    wait_until(lambda: second(higher) is ExecutionStatus.FINISHED, timeout=60, what="the higher key's dependent")
    wait_until(lambda: second(lower) is ExecutionStatus.FINISHED, timeout=60, what="the lower key's dependent")



# --- the sweep's cost: walks from the first row only now and then ------------------------
class Rounds:
    """Claim rounds a coordinator made, spied on in this process (see claims.claim)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, slow_from_start: float = 0.0) -> None:
        self.all = 0
        self.from_start = 0
        real = claims.claim

        def spy(conn: sa.Connection, **kwargs: Any) -> claims.Round:
            self.all += 1
            if kwargs.get("keys") is None and kwargs.get("after") is None:
                self.from_start += 1
                time.sleep(slow_from_start)  # as a walk through a long history would take
            return real(conn, **kwargs)

        monkeypatch.setattr(claims, "claim", spy)


def test_an_unfinished_item_is_claimed_again_by_key_not_by_a_sweep_from_the_start(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep from the first row walks every finished item once: doing that for every item
    # that ends unfinished made claim cost grow with history (0.25x at 500,000 items).
    rounds = Rounds(monkeypatch)
    # Polls and wraps only every 120 s: the test is over long before a timed wrap.
    c = app.coordinator(poll_seconds=120, max_poll_seconds=120, concurrency=1)
    ids = app.add(*["unfinished:2"] * 6)
    c.start()
    app.wait_status(ids, (ExecutionStatus.FINISHED,))
    assert [app.item(i).runs for i in ids] == [2] * 6
    assert rounds.from_start == 1  # the first claim only


@pytest.mark.parametrize("query", ["every row", "no order"])
def test_an_idle_worker_does_not_walk_the_source_at_every_poll(
    app: App, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    # Nothing claimable: the first sweep from the start finds nothing; the cursor then stands
    # at the source's top key, so later polls (every 0.05 s doubling) do not walk it again.
    rounds = Rounds(monkeypatch)
    eligible = None if query == "every row" else _ready_in_no_order
    c = app.coordinator(eligible=eligible, poll_seconds=0.05, max_poll_seconds=120)
    ids = app.add("finish", "finish")
    with app.db.engine.begin() as conn:  # finished long ago: nothing is claimable
        finished = [{"source_id": i, "execution_status": "finished"} for i in ids]
        conn.execute(sa.insert(c.workers["items"].table), finished)
    c.start()
    wait_until(lambda: rounds.all >= 6, what="six polls")
    assert rounds.from_start == 1
    [late] = app.add("finish")  # above the top: the sweep from the cursor finds it
    app.wait_status([late])


def test_a_slow_wrap_is_spaced_out(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep from the start that takes 0.3 s (a long history) is not repeated every
    # max_poll_seconds (0.5 s) but after 100 times as long: wraps cost ~1% of the time.
    rounds = Rounds(monkeypatch, slow_from_start=0.3)
    c = app.coordinator(eligible=_ready_in_no_order, poll_seconds=0.05, max_poll_seconds=0.5)
    app.add("finish", ready=False)
    c.start()
    wait_until(lambda: rounds.all >= 8, what="eight polls")
    assert rounds.from_start == 1


def test_wake_ups_that_name_no_row_wrap_only_as_often_as_a_wrap_costs(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wake-up that names no row and finds nothing past the cursor looks behind it (the
    # tests above), but a wrap that took 0.3 s (a long history) allows the next in 30 s only
    # (after a loop's first wrap, which is cold, in tuning.COLD_WRAP_SPACING_MAX: 5 s).
    rounds = Rounds(monkeypatch, slow_from_start=0.3)
    c = app.coordinator(eligible=_ready_in_no_order, poll_seconds=120, max_poll_seconds=120)
    app.add("finish", ready=False)
    c.start()
    wait_until(lambda: rounds.all >= 1, what="the first claim")
    for n in range(2, 7):
        c.wake()
        wait_until(lambda n=n: rounds.all >= n, what=f"claim {n}")
    assert rounds.from_start == 1


def test_an_expired_claim_behind_the_cursor_is_taken_over_between_spaced_out_wraps(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first wrap takes 2 s (a long history): the next waits 200 s. A claim that expires
    # behind the cursor meanwhile (its process died) is found through the lease index.
    Rounds(monkeypatch, slow_from_start=2.0)
    c = app.coordinator(poll_seconds=0.05, max_poll_seconds=0.5)
    [dead, later] = app.add("finish", "finish")
    with app.db.engine.begin() as conn:
        caps = dialects.of(conn)
        conn.execute(
            sa.insert(c.workers["items"].table).values(
                source_id=dead,
                execution_status="working",
                claim_token=str(uuid.uuid4()),
                lease_expires_at=caps.now_plus(4),  # live at the first claim, by the server's clock
            )
        )
    c.start()
    app.wait_status([later])  # the cursor is now past `dead`
    app.wait_status([dead], (ExecutionStatus.FINISHED,), timeout=60)


def test_a_failed_item_reset_behind_the_sweep_is_claimed_at_once(app: App) -> None:
    """PostgreSQL: reset_failed announces the item with the caller's commit, no trigger needed."""
    if app.db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY exists on PostgreSQL only; other servers poll")
    # Polls and wraps only every 120 s: only the announcement can find the item in time.
    c = app.coordinator(poll_seconds=120, max_poll_seconds=120)
    [bad, good] = app.add("fail", "finish")
    c.start()
    app.wait_status([bad, good])  # the sweep's cursor is past both
    assert app.status(bad) is ExecutionStatus.FAILED
    with Session(app.db.engine) as s:
        s.get(basic.Item, bad).action = "finish"  # type: ignore[union-attr]
        assert c.workers["items"].reset_failed(s, bad)
        s.commit()
    app.wait_status([bad], (ExecutionStatus.FINISHED,), timeout=60)
