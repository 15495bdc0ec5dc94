"""Lease renewal: every third of a lease, extend the leases of every running item.

One thread per coordinator, apart from the claim loops, so a loop busy with the database
never lets a running item's lease lapse. Renewal failures are retried with backoff; a
claim found taken by another process (or cancelled) is reported as lost and its handler
ended (the fence would discard its result anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy.engine import Engine

from dbworker import redact
from dbworker.backoff import Backoff
from dbworker.observe import Observer
from dbworker.sql import items, poolers
from dbworker.sql.dialects import connect
from dbworker.sql.items import Claim
from dbworker.tuning import RENEW_ERROR_FIRST_WAIT
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")


class Held(Protocol):
    """A claim loop, as far as its leases go: the claims it holds and how to reach its database."""

    @property
    def worker(self) -> RegisteredWorker: ...

    @property
    def engine(self) -> Engine: ...

    def held_claims(self) -> list[Claim]: ...

    def claims_lost(self, lost: list[Claim]) -> None: ...


class LeaseKeeper:
    """Renews the leases of every loop's running items until stopped."""

    def __init__(
        self,
        loops: Sequence[Held],
        *,
        lease_seconds: float,
        observer: Observer,
        secrets: tuple[str, ...],
        hint: poolers.Hint | None = None,
    ) -> None:
        self._loops = list(loops)
        self._hint = hint or poolers.Hint(transaction_pooler=False)
        self._lease = lease_seconds
        self._interval = lease_seconds / 3
        self._observer = observer
        self._secrets = secrets
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dbworker-leases", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        errors = Backoff(RENEW_ERROR_FIRST_WAIT, self._interval, jitter=0.5)
        wait = self._interval
        while not self._stop.wait(wait):
            failed = False
            for loop in self._loops:
                if not self.renew(loop):
                    failed = True
            wait = errors.next() if failed else self._interval
            if not failed:
                errors.reset()

    def renew(self, loop: Held) -> bool:
        """Renew one loop's running claims; False when the database failed."""
        running = loop.held_claims()
        if not running:
            return True
        name = loop.worker.name
        try:
            with connect(loop.engine) as conn:
                lost = items.renew(conn, loop.worker.table, running, lease_seconds=self._lease)
        except Exception as exc:
            log.warning("dbworker worker %s: database error during renew: %s", name, redact.describe(exc, self._secrets))
            self._hint.check(name, exc)
            self._observer.db_error(name, operation="renew", error=exc)
            self._observer.renewed(name, result="error", count=len(running))
            return False
        # A claim that completed while we renewed is not lost: keep only those still running.
        still = {c.token for c in loop.held_claims()}
        lost = [c for c in lost if c.token in still]
        for c in lost:
            log.warning(
                "dbworker worker %s: lost the claim of item %r (cancelled, or its lease expired and another "
                "process took it); ending its handler", name, c.source_id,
            )
        if lost:
            loop.claims_lost(lost)  # its writes would be discarded by the fence: end it now
            self._observer.renewed(name, result="lost", count=len(lost))
        if len(running) > len(lost):
            self._observer.renewed(name, result="renewed", count=len(running) - len(lost))
        self._observer.heartbeat(name, timestamp=time.time())
        return True

