"""The application of the I/O-bound benchmark (benchmarks/io_bound.py): each item's handler
awaits a response from a local HTTP server (which answers after a fixed delay), then writes
one row. The same work as an ``async def`` handler and as a sync one, for comparison.
Module-level handlers, so they pickle to dbworker's handler processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
from sqlalchemy import BigInteger, Float, Integer
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from dbworker import Finished, Outcome

URL_VARIABLE = "DBWORKER_BENCH_IO_URL"  # the slow HTTP server's address


class Base(DeclarativeBase):
    pass


class IoItem(Base):
    __tablename__ = "io_item"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    created: Mapped[float] = mapped_column(Float)  # Unix time the row was inserted


class IoOut(Base):
    __tablename__ = "io_out"

    item_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    status: Mapped[int] = mapped_column(Integer)
    started: Mapped[float] = mapped_column(Float)  # Unix time the handler began


_async_client: Any = None
_sync_client: httpx.Client | None = None


async def handle_async(item: IoItem, session: AsyncSession) -> Outcome:
    global _async_client
    started = time.time()
    if _async_client is None:  # one client per handler process and its event loop
        _async_client = httpx.AsyncClient(base_url=os.environ[URL_VARIABLE], timeout=30,
                                          limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))  # fmt: skip
    response = await _async_client.get(f"/work/{item.id}")
    session.add(IoOut(item_id=item.id, status=response.status_code, started=started))
    return Finished()


def handle_sync(item: IoItem, session: Session) -> Outcome:
    global _sync_client
    started = time.time()
    if _sync_client is None:
        _sync_client = httpx.Client(base_url=os.environ[URL_VARIABLE], timeout=30)
    response = _sync_client.get(f"/work/{item.id}")
    session.add(IoOut(item_id=item.id, status=response.status_code, started=started))
    return Finished()
