"""The claimed source rows of an async handler process, read together.

The items one turn of the event loop starts (a pool's dispatch hands over claims in
batches) each ask for their row; one ``SELECT ... WHERE key IN (...)`` reads them all on
one connection held for that read only (autocommit on PostgreSQL), instead of a round trip,
a connection checkout and an ORM query per item. Each row comes back detached, for the
item's own session to take. A key the read did not return as asked (gone, or asked for
twice at once) is answered ``AGAIN``: the item reads it alone, as before, which also says
when it no longer exists.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from dbworker.tuning import KEYS_PER_STATEMENT

if TYPE_CHECKING:  # imported where used: SQLAlchemy's asyncio needs greenlet (the `async` extra)
    from sqlalchemy.ext.asyncio import AsyncEngine

AGAIN = object()  # not in this batch's answer: read the row alone


class RowLoader:
    """Rows of ``source`` by primary key, read in batches on ``engine``."""

    def __init__(self, engine: AsyncEngine, source: Any, *, autocommit: bool) -> None:
        self._engine = engine
        key = sa.inspect(source).primary_key[0]
        self._many = sa.select(source).where(key.in_(sa.bindparam("dbw_keys", expanding=True)))
        self._autocommit = autocommit
        self._waiting: dict[Any, list[asyncio.Future[Any]]] = {}
        # The running reads (the loop keeps only weak references to tasks).
        self._reads: set[asyncio.Task[None]] = set()

    async def get(self, key: Any) -> Any:
        """The detached row of ``key`` (read with the others asked for in this turn), or ``AGAIN``."""
        loop = asyncio.get_running_loop()
        if not self._waiting:
            loop.call_soon(self._read_waiting)  # after every item of this turn has asked
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.setdefault(key, []).append(future)
        return await future

    def _read_waiting(self) -> None:
        batch, self._waiting = self._waiting, {}
        task = asyncio.get_running_loop().create_task(self._read(batch))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _read(self, batch: dict[Any, list[asyncio.Future[Any]]]) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession

        rows: dict[Any, Any] = {}
        try:
            async with AsyncSession(self._engine, expire_on_commit=False) as session:
                if self._autocommit:
                    await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
                keys = list(batch)
                for at in range(0, len(keys), KEYS_PER_STATEMENT):
                    result = await session.execute(self._many, {"dbw_keys": keys[at : at + KEYS_PER_STATEMENT]})
                    for row in result.scalars():
                        rows[sa.inspect(row).identity[0]] = row
                session.expunge_all()  # detached: each item's session takes its own
                await session.rollback()
        except BaseException as exc:
            for futures in batch.values():
                for future in futures:
                    if future.done():
                        continue
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for key, futures in batch.items():
            for i, future in enumerate(futures):
                if not future.done():  # its item may have been cancelled meanwhile
                    future.set_result(rows.get(key, AGAIN) if i == 0 else AGAIN)
