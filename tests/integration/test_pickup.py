"""Pick-up out of the box: the wake-up triggers installed by default, on every database.

Polls are set to 120 s, so only a wake-up can have a worker claim within the tests' bounds:
a dependent item whose dependency finished in another coordinator, a row committed with a
lower change id after a higher one (MySQL/MariaDB), and an ordered eligible query whose
filter is evaluated only for claimable rows, never again for the finished history.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from dbworker import Coordinator, ExecutionStatus, tuning
from dbworker import sweep as sweeps
from tests import pooler
from tests.apps import basic
from tests.helpers import wait_until
from tests.integration.conftest import App
from tests.integration.test_eligible import EmptyPolls, _register_second

SLOW = {"poll_seconds": 120, "max_poll_seconds": 120}


def test_a_dependent_item_is_claimed_when_its_dependency_finishes_in_another_coordinator(app: App) -> None:
    first = app.coordinator(**SLOW)
    _register_second(first)
    first.create_worker_tables()
    second = app.coordinator(**SLOW)
    _register_second(second)
    polls = EmptyPolls()
    second.add_observer(polls)
    second.start(workers=["second"])
    first.start(workers=["items"])
    wait_until(lambda: polls.seen, what="the dependent worker's first, empty poll")
    [i] = app.add("finish")
    app.wait_status([i], (ExecutionStatus.FINISHED,), timeout=60)

    def dependent_done() -> bool:
        with Session(app.db.engine) as s:
            return second.execution_status(s, worker="second", source_id=i) == ExecutionStatus.FINISHED

    wait_until(dependent_done, timeout=60, what="the dependent item to finish")


def test_a_row_committed_after_a_later_one_is_still_named(app: App) -> None:
    """MySQL/MariaDB: a change id taken first but committed last is read when it appears."""
    if app.db.backend == "sqlite":
        pytest.skip("SQLite writers take turns: ids are committed in order")
    c = app.coordinator(**SLOW)
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen, what="the first, empty poll")
    with app.db.engine.connect() as held:
        held.execute(sa.insert(basic.Item).values(id=5, action="finish"))  # open: not visible yet
        [later] = app.add("finish")  # a higher key, committed first
        app.wait_status([later], (ExecutionStatus.FINISHED,), timeout=60)
        held.commit()
    app.wait_status([5], (ExecutionStatus.FINISHED,), timeout=60)


# --- how often the application's eligible filter runs ----------------------------------------


def _counting_engine(app: App) -> tuple[sa.Engine, Any]:
    """An engine whose database has ``dbw_count(x)``: returns x, counting its calls; and a
    function reading the count."""
    engine = sa.create_engine(app.db.url, pool_pre_ping=True)
    backend = app.db.backend
    if backend == "sqlite":
        calls = itertools.count()
        seen = [0]

        def counted(x: Any) -> Any:
            seen[0] = next(calls) + 1
            return x

        @sa.event.listens_for(engine, "connect")
        def _register(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.create_function("dbw_count", 1, counted)

        return engine, lambda: seen[0]
    with app.db.engine.begin() as conn:
        if backend == "postgresql":
            conn.exec_driver_sql("CREATE SEQUENCE dbw_calls")
            conn.exec_driver_sql(
                "CREATE FUNCTION dbw_count(x integer) RETURNS integer LANGUAGE plpgsql VOLATILE "
                "AS $$ BEGIN PERFORM nextval('dbw_calls'); RETURN x; END $$"
            )
        else:
            conn.exec_driver_sql("CREATE TABLE dbw_calls (n BIGINT NOT NULL)")
            conn.exec_driver_sql("INSERT INTO dbw_calls VALUES (0)")
            conn.exec_driver_sql(
                "CREATE FUNCTION dbw_count(x INT) RETURNS INT NOT DETERMINISTIC MODIFIES SQL DATA "
                "BEGIN UPDATE dbw_calls SET n = n + 1; RETURN x; END"
            )

    def count() -> int:
        with app.db.engine.connect() as conn:
            if backend == "postgresql":
                value, called = conn.exec_driver_sql("SELECT last_value, is_called FROM dbw_calls").one()
                return int(value) if called else 0
            return int(conn.exec_driver_sql("SELECT n FROM dbw_calls").scalar_one())

    return engine, count


def _counted_by_priority() -> sa.Select[Any]:
    return sa.select(basic.Item).where(sa.func.dbw_count(basic.Item.priority) >= 0).order_by(basic.Item.priority.desc())


def test_an_ordered_eligible_filter_is_not_run_for_the_finished_history(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 finished items, polls every 0.1 s: after the first sweep no poll calls the filter,
    and a new row is evaluated and claimed."""
    # No periodic wrap within the test (one would walk the history again, by design rarely).
    monkeypatch.setattr(sweeps, "FED_WRAP_POLLS", 1_000_000)
    basic.create_app_tables(app.db.engine)
    engine, calls = _counting_engine(app)
    c = Coordinator(sessionmaker(engine), database_url=app.db.url, poll_seconds=0.1, max_poll_seconds=0.1,
                    **pooler.coordinator_options(app.db.url))  # fmt: skip
    app.coordinators.append(c)
    c.transactional_worker(name="items", source=basic.Item, eligible=_counted_by_priority)(basic.handle)
    c.create_worker_tables()
    done = app.add(*["finish"] * 200)
    work = c.workers["items"].table
    with app.db.engine.begin() as conn:
        conn.execute(sa.insert(work), [{"source_id": i, "execution_status": "finished"} for i in done])
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen >= 2, what="the first sweep and an empty poll")
    before, seen = calls(), polls.seen
    wait_until(lambda: polls.seen >= seen + 30, timeout=60, what="30 more empty polls")
    assert calls() == before, "a poll evaluated the eligible filter for finished rows"
    [new] = app.add("finish", priority=3)
    app.wait_status([new], (ExecutionStatus.FINISHED,), timeout=60)
    assert calls() > before


def test_the_change_table_is_read_in_order_and_pruned(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """MySQL/MariaDB and SQLite: each payload is handed on once, rows a minute old go (all but
    the newest, so ids never start over), and what is written after is read."""
    if app.db.backend == "postgresql":
        pytest.skip("PostgreSQL notifies: it has no change table")
    from dbworker.sql import changes as sql_changes
    from dbworker.wakeups import changes

    monkeypatch.setattr(tuning, "KEEP_SECONDS", 0.4)
    app.coordinator()  # the tables and the triggers
    got: list[str] = []
    feed = changes.ChangeFeed(app.db.engine, got.append, lambda: got.append("<all>"), secrets=())
    assert feed.read() == 0  # the first read only learns where the table stands
    app.add("finish")
    with app.db.engine.begin() as conn:
        sql_changes.write(conn, ["again:items 1"])
    feed.read()
    assert got == ['rows:items ["1"]', "again:items 1"]
    feed.read()
    assert len(got) == 2

    def pruned() -> bool:
        feed.read()
        with app.db.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(sql_changes.TABLE)).scalar_one() <= 1

    wait_until(pruned, timeout=30, what="the change table's old rows to be pruned")
    with app.db.engine.begin() as conn:
        sql_changes.write(conn, ["again:items 2"])
    feed.read()
    assert got[2:] == ["again:items 2"]


def test_a_change_still_held_when_a_reader_starts_is_read_once_committed(app: App) -> None:
    """MySQL/MariaDB: ids are taken at insert and seen at commit, so a reader starting after a
    higher id committed looks for the lower ones it has not seen."""
    if app.db.backend != "mariadb":
        pytest.skip("MariaDB's ids become visible out of order; SQLite's in order; PostgreSQL notifies")
    from dbworker.sql import changes as sql_changes
    from dbworker.wakeups import changes

    app.coordinator()  # the tables and the triggers
    got: list[str] = []
    with app.db.engine.connect() as held:
        sql_changes.write(held, ["again:items 1"])  # its id is taken; not committed
        with app.db.engine.begin() as conn:
            sql_changes.write(conn, ["again:items 2"])
        feed = changes.ChangeFeed(app.db.engine, got.append, lambda: got.append("<all>"), secrets=())
        assert feed.read() == 0  # the first read learns where the table stands
        held.commit()
    feed.read()
    assert got == ["again:items 1"]


@pytest.mark.slow
def test_a_fleet_walks_the_history_once_per_wrap_whatever_its_size(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four coordinators, polls every 0.1 s, wraps due every 0.6 s: the wraps are taken in turn
    (one walk per interval for the fleet, not one per pod), a coordinator started later
    begins where the last wrap left off instead of at the first row, and a new row is still
    claimed by one of them."""
    from tests.integration.test_eligible import Rounds

    monkeypatch.setattr(sweeps, "FED_WRAP_SPACING", 0)  # wraps due every 6 x max_poll_seconds
    rounds = Rounds(monkeypatch)
    fleet = [app.coordinator(poll_seconds=0.1, max_poll_seconds=0.1) for _ in range(3)]
    ids = app.add("finish", "finish")
    with app.db.engine.begin() as conn:  # finished long ago: nothing is claimable
        conn.execute(sa.insert(fleet[0].workers["items"].table),
                     [{"source_id": i, "execution_status": "finished"} for i in ids])  # fmt: skip
    polls = EmptyPolls()
    for c in fleet:
        c.add_observer(polls)
        c.start()
    wait_until(lambda: polls.seen >= 3, what="every coordinator's first poll")
    walks, began = rounds.from_start, time.monotonic()
    late = app.coordinator(poll_seconds=0.1, max_poll_seconds=0.1)
    late.start()  # no walk of its own: the fleet's last wrap is recent
    wait_until(lambda: time.monotonic() - began > 6 and polls.seen >= 40, timeout=60, what="about 6 s of polls")
    elapsed = time.monotonic() - began
    # One walk per wrap interval for the fleet (plus slack for a wake-up's wrap): four pods
    # wrapping on their own would walk four times as often.
    interval = sweeps.FED_WRAP_POLLS * 0.1
    assert rounds.from_start - walks <= 1.5 * elapsed / interval + 3, (rounds.from_start - walks, elapsed)
    [new] = app.add("finish")
    app.wait_status([new], (ExecutionStatus.FINISHED,), timeout=60)


def test_a_row_another_transaction_held_while_a_claim_skipped_it_is_claimed_once_released(app: App) -> None:
    """PostgreSQL, MySQL/MariaDB: SKIP LOCKED passes over a row another transaction holds.
    Finding nothing else, the cursor must not jump past it to the top: nothing would name
    the row again (its holder wrote nothing), and it would wait for a wrap."""
    if app.db.backend == "sqlite":
        pytest.skip("SQLite claims take no row locks")
    c = app.coordinator(poll_seconds=0.25, max_poll_seconds=10)  # wraps at least 60 s apart
    [held] = app.add("finish")
    polls = EmptyPolls()
    c.add_observer(polls)
    with app.db.engine.connect() as holder:
        holder.execute(sa.select(basic.Item).where(basic.Item.id == held).with_for_update())
        c.start()
        wait_until(lambda: polls.seen >= 2, what="claims that found the row held")
        holder.rollback()
    app.wait_status([held], (ExecutionStatus.FINISHED,), timeout=30)


@pytest.mark.slow
def test_a_row_locked_for_long_and_released_without_a_write_is_claimed_soon(app: App) -> None:
    """A lock released without a write (FOR UPDATE, then a rollback) sends no wake-up: the
    loop claims again on a backoff while it meets locked rows, and that backoff stops at
    ``tuning.LOCKED_ROWS_MAX_WAIT``. Doubling up to the 120 s poll instead, a row held for
    25 s was claimed ~16 s after its release (found by tests/model)."""
    if app.db.backend == "sqlite":
        pytest.skip("SQLite claims take no row locks")
    c = app.coordinator(**SLOW)
    [held] = app.add("finish")
    polls = EmptyPolls()
    c.add_observer(polls)
    with app.db.engine.connect() as holder:
        holder.execute(sa.select(basic.Item).where(basic.Item.id == held).with_for_update())
        c.start()
        wait_until(lambda: polls.seen >= 1, what="a claim that found the row locked")
        time.sleep(25)  # the application's long lock: the scenario itself, not a wait for it
        holder.rollback()
    released = time.monotonic()
    app.wait_status([held], (ExecutionStatus.FINISHED,), timeout=60)
    assert time.monotonic() - released < 8 + tuning.LOCKED_ROWS_MAX_WAIT


def test_a_failed_item_reset_behind_the_cursor_is_claimed_at_once(app: App) -> None:
    """reset_failed announces the keys on every database (NOTIFY, or the change table), so
    the reset item is claimed by key wherever the sweep's cursor stands."""
    c = app.coordinator(**SLOW)
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen, what="the first, empty poll")
    [flaky] = app.add("flaky:2")  # fails at its first run, succeeds at its second
    app.wait_status([flaky], (ExecutionStatus.FAILED,), timeout=60)
    [ahead] = app.add("finish")  # the cursor passes the failed item
    app.wait_status([ahead], (ExecutionStatus.FINISHED,), timeout=60)
    with Session(app.db.engine) as s:
        assert c.workers["items"].reset_failed(s, flaky) is True
        s.commit()
    app.wait_status([flaky], (ExecutionStatus.FINISHED,), timeout=60)


def test_a_row_committed_while_the_listener_was_away_is_claimed_once_it_listens_again(app: App) -> None:
    """PostgreSQL: notifications sent while the listener reconnects are lost; once it listens
    again every loop looks, so the row is not left to the 120 s poll."""
    if app.db.backend != "postgresql":
        pytest.skip("the LISTEN connection is PostgreSQL's")
    listening = sa.text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )
    direct = pooler.direct_engine(app.db.url)  # the listener's session is on the server itself
    try:
        with direct.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # fresh reads
            others = set(conn.execute(listening).scalars())  # other coordinators': left alone
            c = app.coordinator(**SLOW)
            polls = EmptyPolls()
            c.add_observer(polls)
            c.start()
            wait_until(lambda: polls.seen, what="the first, empty poll")
            ours = wait_until(lambda: set(conn.execute(listening).scalars()) - others, what="the listener's session")
            for pid in ours:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        [i] = app.add("finish")  # notified to no one: the listener has not reconnected yet
    finally:
        direct.dispose()
    app.wait_status([i], (ExecutionStatus.FINISHED,), timeout=30)


def test_two_workers_on_one_source_each_claim_every_row_of_a_burst(app: App) -> None:
    """Claims lock the source rows they take: a round of one worker skips the rows another
    worker's claim holds at that moment, and must not pass them for good (they would wait
    for its next wrap, far beyond the 120 s poll here)."""
    c = app.coordinator(**SLOW)
    c.transactional_worker(name="also", source=basic.Item, concurrency=2)(basic.handle_then)
    c.create_worker_tables()
    polls = EmptyPolls()
    c.add_observer(polls)
    c.start()
    wait_until(lambda: polls.seen >= 2, what="both workers' first, empty polls")
    ids: list[int] = []

    def both_done() -> bool:
        with Session(app.db.engine) as s:
            return all(c.execution_status(s, worker=w, source_id=i) is ExecutionStatus.FINISHED
                       for w in ("items", "also") for i in ids)  # fmt: skip

    for _ in range(5):
        ids.extend(app.add(*["finish"] * 8))
        wait_until(both_done, timeout=30, what=f"both workers to finish items {ids[0]}-{ids[-1]}")
