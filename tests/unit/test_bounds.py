"""Every number a user gives has an upper bound, checked where it enters, with an error naming
the field, the bound and the fix (bounds.py; the reasons are docs/bounds.md's)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, Retry, Unfinished, bounds
from dbworker.pod import options, termination
from tests.apps import basic

TEN_YEARS = 10 * 365 * 86400
HUGE = (1e13, 1e308, float("inf"))


def coordinator(tmp_path: Any, **settings: Any) -> Coordinator:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    return Coordinator(sessionmaker(sa.create_engine(url)), database_url=url, **settings)


def test_the_bounds() -> None:
    assert bounds.WAIT.maximum == TEN_YEARS
    assert bounds.SETTING.maximum == 86400
    assert bounds.CONCURRENCY.maximum == 1024
    assert bounds.ATTEMPTS.maximum == 2**31 - 1
    assert bounds.exceeds(float("nan"), bounds.WAIT)


@pytest.mark.parametrize("after", [1e13, 1e308, dt.timedelta(days=3651), TEN_YEARS + 1])
def test_unfinished_after_is_at_most_ten_years(after: Any) -> None:
    with pytest.raises(ValueError, match=r"Unfinished\(after=\.\.\.\) must be at most 3\.1536e\+08 seconds \(10 years\), got .*; keep the row out of the eligible query"):
        Unfinished(after=after)
    assert Unfinished(after=TEN_YEARS).after_seconds == TEN_YEARS
    assert Unfinished(after=dt.timedelta(days=3650)).after_seconds == TEN_YEARS


@pytest.mark.parametrize("field", ["delay", "max_delay"])
@pytest.mark.parametrize("value", [1e13, 1e308])
def test_retry_delays_are_at_most_ten_years(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"Retry\({field}=\.\.\.\) must be at most 3\.1536e\+08 seconds \(10 years\)"):
        Retry(max_attempts=3, **{field: value})
    Retry(max_attempts=3, delay=TEN_YEARS, max_delay=TEN_YEARS)


def test_retry_attempts_fit_the_attempts_column() -> None:
    with pytest.raises(ValueError, match=r"Retry\(max_attempts=\.\.\.\) must be at most 2\.14748e\+09 \(2147483647"):
        Retry(max_attempts=2**31)
    Retry(max_attempts=2**31 - 1)


@pytest.mark.parametrize("field", ["lease_seconds", "poll_seconds", "max_poll_seconds"])
@pytest.mark.parametrize("value", HUGE)
def test_coordinator_settings_are_at_most_a_day(tmp_path: Any, field: str, value: float) -> None:
    extra = {"max_poll_seconds": value} if field == "poll_seconds" else {}  # keep poll <= max_poll
    with pytest.raises(ValueError, match=rf"{field} must be at most 86400 seconds \(1 day\), got .*; use a shorter period"):
        coordinator(tmp_path, **{field: value, **extra})
    c = coordinator(tmp_path)
    with pytest.raises(ValueError, match=rf"{field} must be at most 86400"):
        c.configure(**{field: value, **extra})
    assert c.lease_seconds == 30  # unchanged
    c.configure(lease_seconds=86400, poll_seconds=86400, max_poll_seconds=86400)


def test_registration_bounds(tmp_path: Any) -> None:
    c = coordinator(tmp_path)
    with pytest.raises(ValueError, match=r"timeout must be at most 3\.1536e\+08 seconds \(10 years\)"):
        c.transactional_worker(name="items", source=basic.Item, timeout=1e308)
    with pytest.raises(ValueError, match=r"concurrency must be at most 1024 \(1024\), got 1025; run more pods instead"):
        c.transactional_worker(name="items", source=basic.Item, concurrency=1025)
    with pytest.raises(ValueError, match=r"periodic 'p': every must be at most 3\.1536e\+08 seconds"):
        c.periodic(name="p", every=1e13)
    with pytest.raises(ValueError, match=r"periodic 'p': retention must be at most 3\.1536e\+08 seconds"):
        c.periodic(name="p", every=60, retention=dt.timedelta(days=4000))
    c.transactional_worker(name="items", source=basic.Item, concurrency=1024, timeout=TEN_YEARS)(basic.handle)
    with pytest.raises(ValueError, match=r"concurrency of items must be at most 1024"):
        c.set_concurrency("items", 10**6)


@pytest.mark.parametrize(
    ("flag", "value", "bound"),
    [
        ("--lease-seconds", "1e308", "86400 seconds (1 day)"),
        ("--poll-seconds", "100000", "86400 seconds (1 day)"),
        ("--max-poll-seconds", "1e13", "86400 seconds (1 day)"),
        ("--drain-seconds", "1e9", "86400 seconds (1 day)"),
        ("--backlog-seconds", "1e308", "86400 seconds (1 day)"),
    ],
)
def test_command_flags_and_variables_are_bounded(flag: str, value: str, bound: str) -> None:
    with pytest.raises(termination.CommandError, match=rf"{flag} must be at most {bound.replace('(', '.').replace(')', '.')}, got '{value}'"):
        options.parse(["run", "app:c", flag, value], {})
    variable = "DBWORKER_" + flag[2:].replace("-", "_").upper()
    with pytest.raises(termination.CommandError, match=rf"{variable} must be at most"):
        options.parse(["run", "app:c"], {variable: value})


def test_command_concurrency_is_bounded() -> None:
    with pytest.raises(termination.CommandError, match=r"--concurrency hash must be at most 1024 \(1024\), got 100000"):
        options.parse(["run", "app:c", "--concurrency", "hash=100000"], {})
    assert options.parse(["run", "app:c", "--concurrency", "hash=1024"], {})["concurrency"] == {"hash": 1024}
