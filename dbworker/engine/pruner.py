"""Keeps one worker's attempt history (and its free limit slots) bounded: a small prune now and then, from its loop.

Each pass deletes at most a batch per step (``sql.history.prune``): attempts older than
``history_days``, then those beyond ``history_attempts`` of items with attempts ended since
the previous pass. Neither walks the history: the first reads the ``ended_at`` index from
its old end, the second reads only the recent attempts' items. A worker with limits also
deletes a batch of free slot rows per kind (``sql.slots.prune``), so keys seen once leave none.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time

from sqlalchemy.engine import Connection

from dbworker import limits
from dbworker.engine.context import Context
from dbworker.sql import history, slots
from dbworker.sql.dialects import connect
from dbworker.tuning import HISTORY_PRUNE_BATCH, HISTORY_PRUNE_MARGIN_SECONDS, HISTORY_PRUNE_SECONDS

log = logging.getLogger("dbworker")


class Pruner:
    """``maybe(now)`` runs a pass when one is due (monotonic clock); errors wait for the next."""

    def __init__(self, ctx: Context, *, every: float = HISTORY_PRUNE_SECONDS, batch: int = HISTORY_PRUNE_BATCH) -> None:
        self._ctx = ctx
        self._table = history.history_table(ctx.worker.table)
        self._every = every
        self._batch = batch
        self._since: dt.datetime | None = None  # server time of the last pass, less a margin
        self.due_at = time.monotonic() + every * random.uniform(0.1, 1.0)

    def maybe(self, now: float) -> int:
        if now < self.due_at:
            return 0
        self.due_at = now + self._every * random.uniform(0.8, 1.2)
        return self.run()

    def run(self) -> int:
        """One pass now; how many rows went (attempts, and free limit slots)."""
        s = self._ctx.settings
        margin = dt.timedelta(seconds=self._every * 2 + HISTORY_PRUNE_MARGIN_SECONDS)
        try:
            with connect(self._ctx.engine) as conn:
                started = history.server_now(conn)
                conn.commit()
                since = self._since if self._since is not None else started - margin
                deleted = history.prune(conn, self._table, keep=s.history_attempts, days=s.history_days,
                                        since=since, batch=self._batch)  # fmt: skip
                freed = self._prune_slots(conn)
        except Exception as exc:  # noqa: BLE001 - the loop outlives every database error
            self._ctx.db_error("prune", exc)
            return 0
        self._since = started - dt.timedelta(seconds=HISTORY_PRUNE_MARGIN_SECONDS)
        if deleted or freed:
            log.debug("dbworker worker %s: pruned %d attempts of the history, %d free limit slots",
                      self._ctx.worker.name, deleted, freed)  # fmt: skip
        return deleted + freed

    def _prune_slots(self, conn: Connection) -> int:
        worker = self._ctx.worker
        if not worker.limits:
            return 0
        return slots.prune(conn, slots.slots_table(worker.table), worker.table, limits.kinds(worker.limits),
                           batch=self._batch)  # fmt: skip
