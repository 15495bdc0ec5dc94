"""Unit tests of dbworker.retries and Unfinished(after=): the policy, without a database."""

from __future__ import annotations

import datetime as dt

import pytest

from dbworker import Retry, Unfinished
from dbworker.retries import decide


def test_delays_grow_by_the_backoff_up_to_the_cap() -> None:
    r = Retry(max_attempts=10, delay=1.0, backoff=2.0, max_delay=5.0)
    assert [r.wait(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_thousands_of_attempts_wait_the_cap() -> None:
    assert Retry(max_attempts=10_000, delay=1.0, max_delay=600.0).wait(5000) == 600.0


def test_jitter_is_a_fraction_of_the_delay_either_way() -> None:
    r = Retry(max_attempts=3, delay=10.0, jitter=0.1)
    assert r.wait(1, 0.0) == pytest.approx(9.0)
    assert r.wait(1, 0.5) == pytest.approx(10.0)
    assert r.wait(1, 0.999999) == pytest.approx(11.0, abs=1e-4)


def test_attempts_count_the_first_one() -> None:
    r = Retry(max_attempts=3, delay=0.2)
    assert decide(r, attempt=1, exc=OSError(), draw=0.5) == pytest.approx(0.2)
    assert decide(r, attempt=2, exc=OSError(), draw=0.5) == pytest.approx(0.4)
    assert decide(r, attempt=3, exc=OSError(), draw=0.5) is None  # the last allowed attempt


def test_only_exceptions_in_on_are_retried_deaths_and_timeouts_always() -> None:
    r = Retry(max_attempts=5, on=(OSError,))
    assert decide(r, attempt=1, exc=ValueError("no"), draw=0.5) is None
    assert decide(r, attempt=1, exc=ConnectionError("reset"), draw=0.5) == 1.0  # an OSError
    assert decide(r, attempt=1, exc=None, draw=0.5) == 1.0
    assert decide(None, attempt=1, exc=OSError(), draw=0.5) is None  # no Retry: fail at once


def test_a_single_exception_class_is_accepted_for_on() -> None:
    assert Retry(max_attempts=2, on=OSError).on == (OSError,)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 3, "delay": -1}, "delay"),
        ({"max_attempts": 3, "backoff": 0.5}, "backoff"),
        ({"max_attempts": 3, "max_delay": "1"}, "max_delay"),
        ({"max_attempts": 3, "jitter": 2}, "jitter"),
        ({"max_attempts": 3, "delay": float("inf")}, "delay"),
        ({"max_attempts": 3, "on": ()}, "on"),
        ({"max_attempts": 3, "on": ("OSError",)}, "on"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=rf"^Retry\({named}=\.\.\.\)"):
        Retry(**kwargs)  # type: ignore[arg-type]


def test_unfinished_after_takes_seconds_or_a_timedelta() -> None:
    assert Unfinished().after_seconds is None
    assert Unfinished() == Unfinished()
    assert Unfinished(after=30).after_seconds == 30.0
    assert Unfinished(after=dt.timedelta(minutes=2)).after_seconds == 120.0
    for bad in (-1, "5", True, float("nan")):
        with pytest.raises(ValueError, match=r"^Unfinished\(after=\.\.\.\)"):
            Unfinished(after=bad)  # type: ignore[arg-type]
