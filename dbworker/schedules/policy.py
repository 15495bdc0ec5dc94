"""When a schedule is due: cron expressions and fixed periods, and which due times to insert.

Pure: no database, no clock. Times are naive UTC, as dbworker stores them; a cron
expression is read in its time zone by ``cronsim`` (Debian cron's rules, DST included),
and a period counts from the Unix epoch, so every coordinator computes the same due times.
"""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo
from dataclasses import dataclass
from typing import Protocol

import cronsim

from dbworker import bounds, tuning

DEFAULT_RETENTION = dt.timedelta(days=7)
_EPOCH = dt.datetime(1970, 1, 1)
_TICK = dt.timedelta(microseconds=1)


class Policy(Protocol):
    """A schedule's due times (naive UTC)."""

    def latest(self, t: dt.datetime) -> dt.datetime | None:
        """The latest due time at or before ``t`` (None: none)."""

    def following(self, t: dt.datetime) -> dt.datetime | None:
        """The first due time after ``t`` (None: none within cron's 50-year search)."""

    def describe(self) -> str:
        """The schedule as the application wrote it (for ``inspect``)."""


@dataclass(frozen=True)
class Every:
    """Every ``period`` from the Unix epoch (UTC): ``every=30`` is due at :00 and :30."""

    period: dt.timedelta

    def latest(self, t: dt.datetime) -> dt.datetime | None:
        return _EPOCH + (t - _EPOCH) // self.period * self.period

    def following(self, t: dt.datetime) -> dt.datetime | None:
        return _EPOCH + ((t - _EPOCH) // self.period + 1) * self.period

    def describe(self) -> str:
        return f"every {self.period.total_seconds():g} s"


@dataclass(frozen=True)
class Cron:
    """A cron expression (5 fields, or 6 with seconds first) read in time zone ``zone``."""

    expression: str
    zone: str = "UTC"

    def latest(self, t: dt.datetime) -> dt.datetime | None:
        # cronsim's reverse walk includes its start when that has microseconds to strip.
        return self._walk(t + _TICK, reverse=True)

    def following(self, t: dt.datetime) -> dt.datetime | None:
        return self._walk(t, reverse=False)

    def describe(self) -> str:
        return f"cron {self.expression!r} ({self.zone})"

    def _walk(self, t: dt.datetime, *, reverse: bool) -> dt.datetime | None:
        local = t.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(self.zone))
        try:
            found = next(cronsim.CronSim(self.expression, local, reverse=reverse))
        except StopIteration:
            return None
        return found.astimezone(dt.UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class Schedule:
    """One ``coordinator.periodic`` registration's timing, as ``schedule()`` validated it."""

    name: str
    policy: Every | Cron
    catch_up: int = 1
    retention: dt.timedelta = DEFAULT_RETENTION


def schedule(
    name: str,
    *,
    cron: object = None,
    every: object = None,
    timezone: object = "UTC",
    catch_up: object = 1,
    retention: object = DEFAULT_RETENTION,
) -> Schedule:
    """A validated ``Schedule``; ``ValueError`` naming the argument and the fix otherwise."""
    if (cron is None) == (every is None):
        raise ValueError(
            f"periodic {name!r}: give exactly one of cron= (e.g. cron='0 3 * * *') or every= "
            "(seconds, or a timedelta), not " + ("both" if cron is not None else "neither")
        )
    if isinstance(catch_up, bool) or not isinstance(catch_up, int) or catch_up < 0:
        raise ValueError(
            f"periodic {name!r}: catch_up must be an integer >= 0 (how many missed due times "
            f"run after downtime; 0 skips them), got {catch_up!r}"
        )
    kept = _seconds(retention)
    if kept is None or kept <= 0:
        raise ValueError(
            f"periodic {name!r}: retention must be a positive number of seconds or a timedelta, got {retention!r}"
        )
    bounds.check(kept, bounds.WAIT, field=f"periodic {name!r}: retention")
    policy: Every | Cron
    if every is not None:
        seconds = _seconds(every)
        if seconds is None or seconds <= 0 or round(seconds * 1_000_000) < 1:
            raise ValueError(
                f"periodic {name!r}: every must be a positive number of seconds or a timedelta "
                f"(e.g. every=30), got {every!r}"
            )
        bounds.check(seconds, bounds.WAIT, field=f"periodic {name!r}: every")
        if timezone != "UTC":
            raise ValueError(
                f"periodic {name!r}: timezone applies to cron= only (every= counts from the "
                f"Unix epoch); drop timezone={timezone!r} or use cron="
            )
        policy = Every(dt.timedelta(microseconds=round(seconds * 1_000_000)))
    else:
        policy = Cron(_cron(name, cron), _zone(name, timezone))
    return Schedule(name=name, policy=policy, catch_up=catch_up, retention=dt.timedelta(seconds=kept))


def due_times(
    policy: Policy,
    *,
    last: dt.datetime | None,
    now: dt.datetime,
    catch_up: int,
    on_time: float = tuning.TICKS_ON_TIME_SECONDS,
) -> list[dt.datetime]:
    """The due times to insert at ``now``, oldest first, after the schedule's ``last`` tick.

    Every due time in (``last``, ``now``] that is at most ``on_time`` seconds old, and the
    ``catch_up`` most recent older ones (missed). Without a ``last`` tick (a schedule run
    for the first time) no missed time runs: there is no downtime to catch up on.
    """
    missed_allowed = 0 if last is None else catch_up
    late = now - dt.timedelta(seconds=on_time)
    found: list[dt.datetime] = []
    missed = 0
    t = policy.latest(now)
    while t is not None and (last is None or t > last):
        if t < late:
            if missed >= missed_allowed:
                break
            missed += 1
        found.append(t)
        t = policy.latest(t - _TICK)
    return found[::-1]


def _seconds(value: object) -> float | None:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _cron(name: str, cron: object) -> str:
    fix = "use five fields, minute hour day-of-month month day-of-week, e.g. '0 3 * * *'"
    if not isinstance(cron, str):
        raise ValueError(f"periodic {name!r}: cron must be a string ({fix}), got {cron!r}")
    try:
        next(cronsim.CronSim(cron, dt.datetime(2000, 1, 1)))
    except (cronsim.CronSimError, StopIteration) as exc:
        reason = str(exc) or "it never matches"
        raise ValueError(f"periodic {name!r}: cron {cron!r} is not a cron expression ({reason}); {fix}") from None
    return cron


def _zone(name: str, timezone: object) -> str:
    if not isinstance(timezone, str) or not timezone:
        raise ValueError(f"periodic {name!r}: timezone must be an IANA zone name such as 'Europe/Paris', got {timezone!r}")
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"periodic {name!r}: unknown timezone {timezone!r}; use an IANA zone name such as "
            "'Europe/Paris' or 'UTC'"
        ) from None
    return timezone
