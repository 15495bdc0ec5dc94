"""Aids for an application's own tests: run claimable items in the calling process.

``drain`` claims and runs items with the same statements, fenced commit, failure, retry and
dependency rules as a running coordinator, but in the caller's process and thread, on the
coordinator's own engine: no child process, no thread, nothing left behind. What is not due
yet (a retry delay, ``Unfinished(after=)``) is left alone, as a coordinator would.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable

from sqlalchemy.engine import URL

from dbworker import aiochild, messages
from dbworker.child import ChildConfig, Runner
from dbworker.coordinator import Coordinator
from dbworker.sql import claims, items
from dbworker.sql.dialects import connect
from dbworker.workers import RegisteredWorker


def drain(coordinator: Coordinator, *, workers: Iterable[str] | None = None, max_items: int = 10000) -> dict[str, int]:
    """Run every claimable item of ``workers`` (default: all) until none is claimable.

    Returns how many items were run per worker (an item run twice, as ``Unfinished``
    steps or retries, counts twice). Stops after ``max_items`` runs in all, so a handler
    that always returns ``Unfinished()`` cannot loop forever. A sync worker's ``timeout``
    is not enforced (the handler runs in this process); an ``async def`` handler runs on an
    event loop of the drain's, with an async engine of its own, its ``timeout`` cancelling
    it. Raises ``KeyError`` for an unknown worker and ``ValueError`` for a bad
    ``max_items`` or for async handlers over an in-memory SQLite database.
    """
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
        raise ValueError(f"max_items must be an integer >= 1, got {max_items!r}")
    names = list(coordinator.workers) if workers is None else [coordinator.workers[n].name for n in workers]
    registered = {w.name: w for w in coordinator.registrations()}
    engine = coordinator.engine
    if any(registered[n].asynchronous for n in names) and engine.url.get_backend_name() == "sqlite" \
            and engine.url.database in (None, "", ":memory:"):  # fmt: skip
        raise ValueError(
            "testing.drain runs async handlers on an async engine of their own, which cannot see an "
            "in-memory SQLite database; use a file, e.g. 'sqlite:///' + str(tmp_path / 'test.db')"
        )
    loop = asyncio.Runner()  # one event loop for every async handler this drain runs
    runners = {name: _runner(coordinator, name, registered[name], loop) for name in names}
    try:
        ran = dict.fromkeys(names, 0)
        total = 0
        progress = True
        while progress and total < max_items:
            progress = False
            for name in names:  # one item per worker per pass: dependencies interleave as in a fleet
                if total >= max_items:
                    break
                w = registered[name]
                with connect(engine) as conn:
                    taken = claims.claim(conn, table=w.table, key=w.key, eligible=w.eligible, limit=1,
                                         lease_seconds=coordinator.lease_seconds, limits=w.limits).taken  # fmt: skip
                if not taken:
                    continue
                report = runners[name].run(taken[0])
                if report.outcome == messages.RETRY:  # a transient database error: give it back
                    with connect(engine) as conn:
                        items.give_back(conn, w.table, taken[0], started=False)
                ran[name] += 1
                total += 1
                progress = True
    finally:
        for runner in runners.values():
            runner.close()  # its statement watch off the coordinator's engine; an async one's own engine
        loop.close()
    return ran


class _AsyncItems:
    """An async worker's items run to completion one at a time on the drain's event loop."""

    def __init__(self, config: ChildConfig, loop: asyncio.Runner) -> None:
        self._runner = aiochild.AsyncRunner(config)
        self._loop = loop

    def run(self, claim: items.Claim) -> messages.Report:
        return self._loop.run(self._runner.run(claim))

    def close(self) -> None:
        self._loop.run(self._runner.close())


def _runner(coordinator: Coordinator, name: str, worker: RegisteredWorker, loop: asyncio.Runner) -> Runner | _AsyncItems:
    config = child_config(coordinator, name)
    return _AsyncItems(config, loop) if worker.asynchronous else Runner(config, engine=coordinator.engine)


def child_config(coordinator: Coordinator, worker: str) -> ChildConfig:
    """What a handler process of ``worker`` is given (for tests that run a pool or a runner)."""
    w = next(r for r in coordinator.registrations() if r.name == coordinator.workers[worker].name)
    return _config(w, coordinator.engine.url, history_logs=coordinator.history_logs,
                   history=coordinator.history_attempts > 0)


def _config(worker: RegisteredWorker, url: URL, *, history_logs: bool = True, history: bool = True) -> ChildConfig:
    return ChildConfig(
        worker=worker.name, database_url=url.render_as_string(hide_password=False), engine_options={}, handler=worker.handler,
        source=worker.source, parent_pid=os.getpid(), retry=worker.retry, history_logs=history_logs, history=history,
        timeout=worker.timeout if worker.asynchronous else None,
    )  # fmt: skip
