"""A started coordinator's threads: a claim loop per worker, the lease keeper, the wake-up services.

``Running`` wires them (the wake-up services ``wakeups.services`` picks for the database)
and starts them together. Stopping has two steps: ``drain`` stops claims and waits for
running handlers, up to a deadline; ``finish`` ends what is left within
``tuning.STOP_MARGIN_SECONDS``: handler processes still running are ended and their claims
given back, and no thread that writes to the database outlives it. Which of ``stop()`` and
``abort()`` runs them, once, is the coordinator's to decide.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy.engine import URL, Engine

from dbworker import tuning
from dbworker.child import ChildConfig
from dbworker.leases import LeaseKeeper
from dbworker.loop import WorkerLoop
from dbworker.observe import Observer
from dbworker.settings import Settings
from dbworker.sql import poolers
from dbworker.wakeups import services
from dbworker.workers import RegisteredWorker

log = logging.getLogger("dbworker")


class Running:
    """The threads of one started coordinator running ``selected`` of its ``registered`` workers."""

    def __init__(
        self,
        engine: Engine,
        registered: Iterable[RegisteredWorker],
        selected: Sequence[RegisteredWorker],
        configs: Mapping[str, ChildConfig],
        *,
        settings: Settings,
        observer: Observer,
        listen_url: URL | None,
        transaction_pooler: bool,
        secrets: tuple[str, ...],
    ) -> None:
        registered = list(registered)
        self._observer = observer
        self.wakeups = services.build(engine, registered, selected, listen_url=listen_url,
                                      transaction_pooler=transaction_pooler, secrets=secrets,
                                      observer=observer)  # fmt: skip
        hint = poolers.Hint(transaction_pooler=transaction_pooler)
        self.loops = [
            WorkerLoop(
                w,
                engine=engine,
                settings=settings,
                child_config=configs[w.name],
                observer=observer,
                on_item_done=self.wakeups.router.item_done,
                secrets=secrets,
                fed=w.key.table.name in self.wakeups.fed,
                shares_source=sum(o.key.table is w.key.table for o in registered) > 1,
                hint=hint,
            )
            for w in selected
        ]
        self.wakeups.attach(self.loops)
        self.keeper = LeaseKeeper(
            self.loops, lease_seconds=settings.lease_seconds, observer=observer, secrets=secrets, hint=hint
        )

    def start(self) -> None:
        """The loops first: the lease keeper renews their claims, the wake-up services wake them."""
        for loop in self.loops:
            loop.start()
        self.keeper.start()
        self.wakeups.start()

    def handler_pids(self) -> list[int]:
        return [pid for loop in self.loops for pid in loop.pool.pids()]

    def dead_threads(self) -> list[str]:
        """The loops and the lease keeper that started and have ended, by name."""
        threads = [(f"loop of worker {loop.worker.name!r}", loop.thread) for loop in self.loops]
        threads.append(("lease keeper", self.keeper.thread))
        return [name for name, t in threads if t.ident is not None and not t.is_alive()]

    def wake(self, worker: str | None) -> None:
        """Have ``worker``'s loop (every loop: None) claim now."""
        for loop in self.loops:
            if worker is None or loop.worker.name == worker:
                loop.wake()

    def request_stop(self) -> None:
        """No loop claims any more (each ends the claim under way first)."""
        for loop in self.loops:
            loop.request_stop()

    def drain(self, timeout: float | None, abort: threading.Event) -> None:
        """Stop claiming and wait for running handlers to end, until ``timeout`` seconds
        passed (None: no limit) or ``abort`` is set."""
        self.request_stop()
        deadline = None if timeout is None else time.monotonic() + timeout
        # Told once no loop claims any more: a claim under way ends first (bounded, as a
        # loop stuck in a database call may not answer).
        seen = tuning.STOP_SEEN_SECONDS if timeout is None else min(tuning.STOP_SEEN_SECONDS, timeout)
        seen_by = time.monotonic() + seen
        for loop in self.loops:
            loop.claims_stopped.wait(max(0.0, seen_by - time.monotonic()))
        self._observer.draining(draining=True)
        self.wakeups.drain()  # e.g. no tick is inserted that a draining fleet would leave unrun
        while any(loop.alive for loop in self.loops):
            if abort.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
            for loop in self.loops:
                loop.thread.join(0.05)

    def finish(self) -> None:
        """End running handlers, give their claims back and stop every thread, within
        ``tuning.STOP_MARGIN_SECONDS``."""
        for loop in self.loops:
            if loop.alive:
                loop.end_running()
        end = time.monotonic() + tuning.STOP_MARGIN_SECONDS
        for loop in self.loops:
            loop.thread.join(max(0.0, end - time.monotonic()))
            if loop.alive:
                # Stuck in a database call: its handler processes must not outlive us.
                log.warning("dbworker worker %s: loop did not stop in time; ending its processes", loop.worker.name)
                loop.pool.kill_all()
        self.wakeups.stop(end)
        self.keeper.stop()
        self.keeper.thread.join(max(0.0, end - time.monotonic()))
