"""What every part of one worker's claim engine shares: the worker, its database, settings,
observers, and the one way a part reports a database error (logged, masked, counted)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from dbworker import redact
from dbworker.engine.spans import ItemSpans
from dbworker.observe import Observer
from dbworker.settings import Settings
from dbworker.sql import poolers
from dbworker.sql.candidates import EligibleNotSelect
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")


@dataclass(frozen=True)
class Context:
    """One worker's engine: ``hint`` names a missing pooler setting when an error shows one."""

    worker: RegisteredWorker
    engine: Engine
    settings: Settings
    observer: Observer
    secrets: tuple[str, ...] = ()
    hint: poolers.Hint = field(default_factory=lambda: poolers.Hint(transaction_pooler=False))
    # Application errors told once (until a claim works again): "eligible".
    told: set[str] = field(default_factory=set, compare=False, repr=False)
    spans: ItemSpans | None = field(default=None, compare=False, repr=False)  # tracing on

    def db_error(self, operation: str, exc: BaseException) -> None:
        """A database error during ``operation`` ("claim", "complete"): the engine goes on.

        An eligible() that returned no select() is the application's error, not the
        database's: one error naming the worker and the fix, no database error counted.
        """
        if isinstance(exc, EligibleNotSelect):
            if "eligible" not in self.told:
                self.told.add("eligible")
                log.error("dbworker worker %s: %s; no item of it is claimed until eligible= is fixed "
                          "(its loop retries with backoff and says this once)", self.worker.name, exc)  # fmt: skip
            return
        log.warning(
            "dbworker worker %s: database error during %s: %s",
            self.worker.name, operation, redact.describe(exc, self.secrets),
        )  # fmt: skip
        self.hint.check(self.worker.name, exc)
        self.observer.db_error(self.worker.name, operation=operation, error=exc)
