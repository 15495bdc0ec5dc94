"""The ``basic`` application's items run by an ``async def`` handler (docs/async.md).

Actions: ``finish``; ``fail``; ``bad`` (a wrong return); ``commit`` (awaits session.commit());
``unfinished:K``; ``later:S`` (``Unfinished(after=S)`` first, then finishes); ``sleep:S``
(awaits S seconds, then finishes); ``block:S`` (``time.sleep(S)``: blocks the event loop);
``kill`` (SIGKILLs its process); ``killonce`` (the same on its first attempt only);
``together:N`` (finishes once N items have started, so N must run at once); ``dbwait``
(awaits its item's ``release`` flag, read on short connections, then finishes);
``progress:N`` (reports k/N, "item I step k" for k = 1..N without awaiting, then as ``dbwait``);
``progresslate`` (reports 0.1, awaits ``release``, reports 0.9, finishes); ``progressfail``
(reports 0.25 "quarter", then raises); ``chat:N`` (once N items started, logs 3 WARNING records
"item I line k", awaiting between them); ``logfail`` (logs one record, then raises). Each run
that reaches its end writes one ``outputs`` row; ``started`` rows (committed on their own)
say that an item started and in which process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator, Finished, Outcome, Retry, Unfinished, report_progress
from tests import pooler
from tests.apps.basic import Item, Output, Started, create_app_tables


async def _mark_started(session: AsyncSession, item_id: int) -> None:
    async with AsyncSession(session.bind) as s:
        s.add(Started(item_id=item_id, pid=os.getpid(), at=time.time()))
        await s.commit()


async def _count(session: AsyncSession, query: sa.Select[Any]) -> Any:
    async with AsyncSession(session.bind) as s:
        return await s.scalar(query)


async def handle(item: Item, session: AsyncSession) -> Outcome:
    action, _, arg = item.action.partition(":")
    await _mark_started(session, item.id)
    item.runs += 1
    if action == "fail":
        raise RuntimeError(f"item {item.id} asked to fail")
    if action == "progress":
        for k in range(1, int(arg) + 1):
            report_progress(k / int(arg), f"item {item.id} step {k}")
        action = "dbwait"
    if action == "progresslate":
        report_progress(0.1)
        await _released(session, item.id)
        report_progress(0.9)
    if action == "progressfail":
        report_progress(0.25, "quarter")
        raise RuntimeError(f"item {item.id} failed after reporting progress")
    if action == "chat":
        await _together(session, int(arg))
        for k in range(1, 4):
            logging.getLogger("tests.items").warning("item %d line %d", item.id, k)
            await asyncio.sleep(0.02)
    if action == "logfail":
        logging.getLogger("tests.items").warning("item %d logged", item.id)
        raise RuntimeError(f"item {item.id} logged and failed")
    if action == "bad":
        return "done"  # type: ignore[return-value]
    if action == "commit":
        await session.commit()
    if action == "later" and item.runs == 1:
        return Unfinished(after=float(arg))
    if action == "sleep":
        await asyncio.sleep(float(arg))
    if action == "block":
        time.sleep(float(arg))
    if action == "kill" or (action == "killonce" and await _starts(session, item.id) == 1):
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "together":
        await _together(session, int(arg))
    if action == "dbwait":
        await _released(session, item.id)
    session.add(Output(item_id=item.id, run=item.runs, pid=os.getpid()))
    if action == "unfinished" and item.runs < int(arg):
        return Unfinished()
    return Finished()


async def _together(session: AsyncSession, n: int) -> None:
    while await _count(session, sa.select(sa.func.count(sa.distinct(Started.item_id)))) < n:
        await asyncio.sleep(0.02)


async def _released(session: AsyncSession, item_id: int) -> None:
    while not await _count(session, sa.select(Item.release).where(Item.id == item_id)):
        await asyncio.sleep(0.05)


async def _starts(session: AsyncSession, item_id: int) -> int:
    return int(await _count(session, sa.select(sa.func.count()).select_from(Started).where(Started.item_id == item_id)))


def build(url: str, *, concurrency: int = 8, processes: int | None = None, retry: Retry | None = None,
          timeout: float | None = None, **settings: Any) -> Coordinator:  # fmt: skip
    """A coordinator on ``url`` with the async worker ``items`` (tables created)."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    coordinator = Coordinator(sessionmaker(engine), database_url=url, **{**pooler.coordinator_options(url), **settings})
    create_app_tables(coordinator.engine)
    coordinator.transactional_worker(name="items", source=Item, concurrency=concurrency, processes=processes,
                                     retry=retry, timeout=timeout)(handle)  # fmt: skip
    coordinator.create_worker_tables()
    return coordinator
