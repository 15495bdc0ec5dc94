"""The coordinator's settings and their one validation.

Every entry point that accepts a lease or poll setting (the constructor, ``configure``,
the command's flags and variables) checks it here, naming the field it came from, so the
rules and their messages live once; so are the constructor's database URL and engine
options and ``stop()``'s timeout. Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import URL, make_url

from dbworker import bounds

FIELDS = ("lease_seconds", "poll_seconds", "max_poll_seconds")
# The attempt history (docs/history.md): the newest attempts kept per item, and for how long.
HISTORY_ATTEMPTS = 20
HISTORY_DAYS = 30.0
HISTORY_LOGS = True  # keep each attempt's log records with it (dbworker.attemptlogs)


@dataclass(frozen=True)
class Settings:
    """Timing settings shared by every loop of a coordinator (built by ``settings()``)."""

    lease_seconds: float
    poll_seconds: float
    max_poll_seconds: float
    history_attempts: int = HISTORY_ATTEMPTS
    history_days: float = HISTORY_DAYS
    history_logs: bool = HISTORY_LOGS


def check_logs(value: object) -> bool:
    """``history_logs`` (True or False); ``ValueError`` naming the field otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"history_logs must be True or False (keep each attempt's log records), got {value!r}")
    return value


def check_history(attempts: object, days: object) -> tuple[int, float]:
    """``history_attempts`` (an int >= 0; 0 records no attempts) and ``history_days``
    (positive); ``ValueError`` naming the field otherwise."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise ValueError(f"history_attempts must be an integer >= 0 (attempts kept per item; 0 records none), "
                         f"got {attempts!r}")
    if isinstance(days, bool) or not isinstance(days, int | float) or not days > 0:
        raise ValueError(f"history_days must be a positive number of days (attempts kept this long), got {days!r}")
    bounds.check(days * 86400.0, bounds.WAIT, field="history_days (in seconds)")
    return attempts, float(days)


def check_seconds(value: object, *, field: str) -> float:
    """``value`` as a positive number of seconds; ``ValueError`` naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{field} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_order(poll_seconds: float, max_poll_seconds: float, *, poll_field: str = "poll_seconds",
                max_field: str = "max_poll_seconds") -> None:  # fmt: skip
    """``ValueError`` when the longest poll wait is below the first one."""
    if max_poll_seconds < poll_seconds:
        raise ValueError(
            f"{max_field} ({max_poll_seconds:g}) must be >= {poll_field} ({poll_seconds:g}): the "
            f"wait after an empty poll doubles from {poll_field} up to {max_field}"
        )


def settings(lease_seconds: object, poll_seconds: object, max_poll_seconds: object, *,
             fields: Mapping[str, str] | None = None, history_attempts: object = HISTORY_ATTEMPTS,
             history_days: object = HISTORY_DAYS, history_logs: object = HISTORY_LOGS) -> Settings:  # fmt: skip
    """Validated settings; ``fields`` renames fields in messages (e.g. to a flag's name)."""
    names = {name: (fields or {}).get(name, name) for name in FIELDS}
    kept, days = check_history(history_attempts, history_days)
    built = Settings(
        lease_seconds=check_seconds(lease_seconds, field=names["lease_seconds"]),
        poll_seconds=check_seconds(poll_seconds, field=names["poll_seconds"]),
        max_poll_seconds=check_seconds(max_poll_seconds, field=names["max_poll_seconds"]),
        history_attempts=kept,
        history_days=days,
        history_logs=check_logs(history_logs),
    )
    check_order(built.poll_seconds, built.max_poll_seconds, poll_field=names["poll_seconds"],
                max_field=names["max_poll_seconds"])  # fmt: skip
    for name in FIELDS:
        bounds.check(getattr(built, name), bounds.SETTING, field=names[name])
    return built


def database_url(value: object) -> URL:
    """``value`` (a string or ``URL``) as a ``URL``; ``ValueError`` with an example otherwise."""
    try:
        return make_url(value)  # type: ignore[arg-type]
    except Exception as exc:
        raise ValueError(
            f"database_url is not a database URL ({type(exc).__name__}); use e.g. "
            "'postgresql+psycopg://user@host/db' or 'sqlite:///path/to/file.db'"
        ) from None


def engine_options(value: object) -> dict[str, Any]:
    """``value`` (None or a mapping of ``create_engine()`` options) as a dict of its own."""
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(f"engine_options must be a dict of create_engine() options, got {type(value).__name__}")
    return dict(value or {})


def stop_timeout(value: object) -> float | None:
    """``stop()``'s ``timeout``: None, or a number of seconds >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {value!r}")
    return float(value)
