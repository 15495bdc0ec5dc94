"""The thread that turns due times into ticks: on each due time of the coordinator's
schedules it inserts the tick (every coordinator tries; the unique index lets one win) and
wakes the schedule's claim loop, so the tick is claimed on time. It also removes ended
ticks past their retention. Which due times to insert is ``policy``'s; the SQL ``ticks``'.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dbworker import redact, tuning
from dbworker.backoff import Backoff
from dbworker.schedules import policy, ticks
from dbworker.schedules.policy import Schedule
from dbworker.sql.dialects import connect

log = logging.getLogger("dbworker")


class TickInserter:
    """Inserts the ticks of ``schedules`` (each with its worker's work table) as they fall
    due, on the database's clock, and calls ``wake(name)`` when one of them did.
    """

    def __init__(
        self,
        engine: Engine,
        schedules: Sequence[tuple[Schedule, sa.Table]],
        *,
        wake: Callable[[str], None],
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.engine = engine
        self._schedules = list(schedules)
        self._wake = wake
        self._secrets = secrets
        self._stop = threading.Event()
        self._next: dict[str, dt.datetime | None] = {}  # each schedule's next due time, once known
        self._prune_at = 0.0  # monotonic
        self.thread = threading.Thread(target=self._run, name="dbworker-schedules", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def drain(self) -> None:
        """Insert no more ticks: a draining fleet would leave them unrun."""
        self._stop.set()

    def stop(self, deadline: float) -> None:
        """End the thread; wait for it until ``deadline`` (``time.monotonic()``): no tick is
        inserted or pruned after the coordinator stopped."""
        self._stop.set()
        self.thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        errors = Backoff(tuning.TICKS_ERROR_FIRST_WAIT, tuning.TICKS_ERROR_MAX_WAIT, jitter=0.5)
        while not self._stop.is_set():
            try:
                wait = self.step()
                errors.reset()
            except Exception as exc:  # noqa: BLE001 - the thread outlives every database error
                log.warning("dbworker schedules: database error: %s", redact.describe(exc, self._secrets))
                wait = errors.next()
            self._stop.wait(wait)

    def step(self) -> float:
        """Insert what is due now and prune if it is time; return the seconds to wait."""
        with connect(self.engine) as conn:
            now = ticks.server_now(conn)
            for schedule, _ in self._schedules:
                name = schedule.name
                known = name in self._next
                at = self._next.get(name)
                if known and (at is None or at > now):
                    continue
                times = policy.due_times(
                    schedule.policy, last=ticks.last_due(conn, name), now=now, catch_up=schedule.catch_up
                )
                if times:
                    inserted = ticks.insert(conn, name, times)
                    log.debug("dbworker schedules: %s at %s: due %s, %d inserted here", name, now, times, inserted)
                self._next[name] = schedule.policy.following(now)
                if times or known:  # a due time passed: whoever inserted it, claim it here too
                    self._wake(name)
            if time.monotonic() >= self._prune_at:
                self._prune_at = time.monotonic() + tuning.TICKS_PRUNE_EVERY_SECONDS
                for schedule, work_table in self._schedules:
                    removed = ticks.prune(conn, schedule.name, work_table, before=now - schedule.retention)
                    if removed:
                        log.info("dbworker schedules: removed %d ended tick(s) of %s", removed, schedule.name)
        soonest = min((at for at in self._next.values() if at is not None), default=None)
        longest = tuning.TICKS_MAX_WAIT_SECONDS
        if soonest is None:
            return longest
        return min(longest, max(0.001, (soonest - now).total_seconds()))
