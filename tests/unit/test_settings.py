"""Unit tests of dbworker.settings: one validation, naming the field it came from."""

from __future__ import annotations

import pytest

from dbworker import settings


def test_valid_settings_are_floats() -> None:
    s = settings.settings(30, 0.25, 10)
    assert (s.lease_seconds, s.poll_seconds, s.max_poll_seconds) == (30.0, 0.25, 10.0)
    assert all(isinstance(v, float) for v in (s.lease_seconds, s.poll_seconds, s.max_poll_seconds))


@pytest.mark.parametrize("value", [0, -1, "5", True, None, float("nan")])
def test_a_non_positive_or_non_number_names_its_field(value: object) -> None:
    with pytest.raises(ValueError, match=r"^lease_seconds must be a positive number of seconds"):
        settings.settings(value, 1, 2)


def test_the_longest_wait_below_the_first_names_both() -> None:
    with pytest.raises(ValueError, match=r"max_poll_seconds \(1\) must be >= poll_seconds \(5\)"):
        settings.settings(30, 5, 1)


def test_fields_can_be_named_as_the_caller_knows_them() -> None:
    flags = {"poll_seconds": "--poll-seconds", "max_poll_seconds": "DBWORKER_MAX_POLL_SECONDS"}
    with pytest.raises(ValueError, match=r"^DBWORKER_MAX_POLL_SECONDS \(1\) must be >= --poll-seconds \(5\)"):
        settings.settings(30, 5, 1, fields=flags)
    with pytest.raises(ValueError, match=r"^--poll-seconds must be"):
        settings.settings(30, 0, 1, fields=flags)
