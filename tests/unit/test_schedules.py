"""The schedules policy without a database: due times of periods and cron expressions (DST
included), which due times a coordinator inserts after downtime, and registration checks.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, Finished
from dbworker.schedules import policy, ticks
from dbworker.schedules.policy import Cron, Every
from tests.apps import periodic

D = dt.datetime
S = dt.timedelta(seconds=1)


def coordinator() -> Coordinator:
    engine = sa.create_engine("sqlite:///unused.db")
    return Coordinator(sessionmaker(engine), database_url="sqlite:///unused.db")


def handler(row: Any, session: Any) -> Finished:
    return Finished()


# --- due times ---------------------------------------------------------------------------


def test_every_counts_from_the_epoch_so_every_coordinator_computes_the_same_times() -> None:
    every = Every(dt.timedelta(seconds=30))
    assert every.latest(D(2026, 1, 1, 12, 0, 29, 999999)) == D(2026, 1, 1, 12, 0, 0)
    assert every.latest(D(2026, 1, 1, 12, 0, 30)) == D(2026, 1, 1, 12, 0, 30)
    assert every.following(D(2026, 1, 1, 12, 0, 30)) == D(2026, 1, 1, 12, 1, 0)


def test_cron_is_read_in_its_time_zone_and_returned_in_naive_utc() -> None:
    paris = Cron("0 3 * * *", "Europe/Paris")
    assert paris.following(D(2026, 1, 10, 12)) == D(2026, 1, 11, 2)  # CET, UTC+1
    assert paris.following(D(2026, 7, 10, 12)) == D(2026, 7, 11, 1)  # CEST, UTC+2
    assert paris.latest(D(2026, 7, 11, 1)) == D(2026, 7, 11, 1)  # at its time: that one


def test_a_cron_time_the_spring_change_skips_runs_once_at_the_first_minute_after_the_gap() -> None:
    # 2026-03-29, Europe/Paris: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    c = Cron("30 2 * * *", "Europe/Paris")
    assert c.following(D(2026, 3, 28, 12)) == D(2026, 3, 29, 1)  # 03:00 CEST
    assert c.following(D(2026, 3, 29, 1)) == D(2026, 3, 30, 0, 30)  # 02:30 CEST again


def test_a_cron_time_the_autumn_change_repeats_runs_once_at_its_first_occurrence() -> None:
    # 2026-10-25, Europe/Paris: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    c = Cron("30 2 * * *", "Europe/Paris")
    assert c.following(D(2026, 10, 24, 12)) == D(2026, 10, 25, 0, 30)  # 02:30 CEST
    assert c.following(D(2026, 10, 25, 0, 30)) == D(2026, 10, 26, 1, 30)  # the next day, CET


def test_a_cron_with_a_wildcard_hour_runs_in_both_copies_of_the_repeated_hour() -> None:
    c = Cron("*/30 * * * *", "Europe/Paris")
    t, seen = D(2026, 10, 24, 23, 50), []
    for _ in range(5):
        t = c.following(t)
        seen.append(t)
    assert seen == [D(2026, 10, 25, 0, 0), D(2026, 10, 25, 0, 30), D(2026, 10, 25, 1, 0),
                    D(2026, 10, 25, 1, 30), D(2026, 10, 25, 2, 0)]  # fmt: skip


def test_a_cron_with_a_wildcard_hour_does_not_run_in_the_skipped_hour() -> None:
    c = Cron("*/30 * * * *", "Europe/Paris")
    # 01:00 and 01:30 CET, then 03:00 CEST: 02:00-03:00 does not exist on 2026-03-29.
    assert c.following(D(2026, 3, 29, 0, 0)) == D(2026, 3, 29, 0, 30)
    assert c.following(D(2026, 3, 29, 0, 30)) == D(2026, 3, 29, 1, 0)


# --- what a coordinator inserts --------------------------------------------------------


EVERY_2 = Every(dt.timedelta(seconds=2))
T0 = D(2026, 1, 1, 0, 0, 0)


def test_the_due_time_just_reached_is_inserted_whatever_catch_up() -> None:
    for catch_up in (0, 1, 5):
        assert policy.due_times(EVERY_2, last=T0, now=T0 + 2 * S + 0.002 * S, catch_up=catch_up) == [T0 + 2 * S]


def test_after_downtime_only_the_catch_up_most_recent_missed_times_are_inserted() -> None:
    now = T0 + 21.5 * S  # the last tick was at T0: 10 due times since, the latest 1.5 s old
    assert policy.due_times(EVERY_2, last=T0, now=now, catch_up=2) == [T0 + 18 * S, T0 + 20 * S]
    assert policy.due_times(EVERY_2, last=T0, now=now, catch_up=1) == [T0 + 20 * S]
    assert policy.due_times(EVERY_2, last=T0, now=now, catch_up=0) == []
    assert len(policy.due_times(EVERY_2, last=T0, now=now, catch_up=100)) == 10


def test_missed_times_beside_one_on_time_count_apart_from_it() -> None:
    now = T0 + 20.3 * S  # 20 is on time (0.3 s old), 18 and before are missed
    assert policy.due_times(EVERY_2, last=T0, now=now, catch_up=1) == [T0 + 18 * S, T0 + 20 * S]
    assert policy.due_times(EVERY_2, last=T0, now=now, catch_up=0) == [T0 + 20 * S]


def test_a_schedule_run_for_the_first_time_catches_nothing_up() -> None:
    assert policy.due_times(EVERY_2, last=None, now=T0 + 21.5 * S, catch_up=3) == []
    assert policy.due_times(EVERY_2, last=None, now=T0 + 20.5 * S, catch_up=3) == [T0 + 20 * S]


def test_nothing_is_inserted_twice() -> None:
    assert policy.due_times(EVERY_2, last=T0 + 20 * S, now=T0 + 21 * S, catch_up=3) == []


def test_a_long_downtime_costs_catch_up_steps_not_one_per_missed_time() -> None:
    every_second = Every(S)
    t = T0 + dt.timedelta(days=365)  # 31 million due times since T0: two missed ones run
    assert policy.due_times(every_second, last=T0, now=t + 0.5 * S, catch_up=2) == [t - 2 * S, t - S, t]


# --- registration checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({}, "exactly one of cron= "),
        ({"cron": "* * * * *", "every": 5}, "not both"),
        ({"every": 0}, "every must be a positive"),
        ({"every": -3}, "every must be a positive"),
        ({"every": dt.timedelta(0)}, "every must be a positive"),
        ({"every": "30"}, "every must be a positive"),
        ({"cron": "61 * * * *"}, "is not a cron expression"),
        ({"cron": "every day"}, "is not a cron expression"),
        ({"cron": 5}, "cron must be a string"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"every": 5, "timezone": "Europe/Paris"}, "timezone applies to cron= only"),
        ({"every": 5, "catch_up": -1}, "catch_up must be an integer >= 0"),
        ({"every": 5, "catch_up": 1.5}, "catch_up must be an integer >= 0"),
        ({"every": 5, "retention": 0}, "retention must be a positive"),
        ({"every": 5, "concurrency": 0}, "concurrency must be an integer >= 1"),
    ],
)
def test_bad_periodic_arguments_fail_at_registration_naming_the_argument(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        coordinator().periodic(name="sync", **kwargs)


def test_a_periodic_worker_is_a_worker_over_the_ticks_table() -> None:
    c = coordinator()
    c.periodic(name="nightly", cron="0 3 * * *", timezone="Europe/Paris", catch_up=0)(handler)
    (w,) = c.registrations()
    assert w.source is ticks.Tick and w.table.name == "nightly_work"
    assert w.schedule == policy.Schedule("nightly", Cron("0 3 * * *", "Europe/Paris"), catch_up=0)
    assert "WHERE dbworker_ticks.name = " in str(w.eligible() if w.eligible else "")
    with pytest.raises(ValueError, match="already registered"):
        c.periodic(name="nightly", every=5)
    with pytest.raises(ValueError, match="worker name 'Bad' is invalid"):
        c.periodic(name="Bad", every=5)


def test_every_takes_seconds_or_a_timedelta() -> None:
    assert policy.schedule("a", every=1.5).policy == Every(dt.timedelta(seconds=1.5))
    assert policy.schedule("a", every=dt.timedelta(minutes=2)).policy == Every(dt.timedelta(minutes=2))


@pytest.mark.parametrize(
    ("due", "words"),
    [
        (periodic.Run.due_at, "due must be a column of the source Post"),
        ("nope", "due must be a column of the source Post"),
        (42, "due must be a column of the source Post"),
        (periodic.Post.draft, "must be a DateTime column"),
    ],
)
def test_a_due_that_is_not_a_datetime_column_of_the_source_fails_at_registration(due: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        coordinator().transactional_worker(name="publish", source=periodic.Post, due=due)


def test_due_narrows_the_eligible_query_to_rows_due_on_the_servers_clock() -> None:
    c = coordinator()
    c.transactional_worker(name="publish", source=periodic.Post, eligible=periodic.not_drafts, due="publish_at")(handler)
    (w,) = c.registrations()
    assert w.due is not None and w.due.column is periodic.Post.__table__.c.publish_at
    query = w.eligible() if w.eligible else None
    assert query is not None
    expected = {
        postgresql.dialect(): "posts.publish_at <= timezone(",
        mysql.dialect(): "posts.publish_at <= utc_timestamp(",
        sqlite.dialect(): "posts.publish_at <= strftime(",
    }
    for dialect, words in expected.items():
        compiled = str(query.compile(dialect=dialect))
        assert words in compiled and "posts.draft IS " in compiled
