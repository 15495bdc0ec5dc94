"""The I/O of the I/O-bound benchmark (benchmarks/io_bound.py), the same for every system's
handler: a pick-up probe records its start (``probe.handler_started``; drained items do
not, so the drain carries no Redis call), then GET ``/work/<item>`` from the local HTTP
server, which answers after a fixed delay. The handler then writes one row its own system's
way. One HTTP client per process: aiohttp on an event loop; httpx's sync client for
Celery's gevent and thread pools. (httpx's async client was not used: without sniffio
installed, httpcore tries to import it on every request, a file-system search that cost
asyncio handlers ~7% of their samples.)
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from benchmarks import probe

URL_VARIABLE = "BENCH_IO_URL"  # the slow HTTP server's address, set by io_bound for every pod
PROBES_VARIABLE = "BENCH_IO_PROBES_FROM"  # items from this id on are pick-up probes

_async_client: Any = None  # aiohttp.ClientSession
_sync_client: httpx.Client | None = None
_sync_lock = threading.Lock()


def _started(item: int) -> None:
    if item >= int(os.environ.get(PROBES_VARIABLE, "0")):
        probe.handler_started(item)


async def fetch(item: int) -> int:
    """The handler's wait, on the running event loop; the response's status."""
    global _async_client
    _started(item)
    if _async_client is None:  # one client per process and its event loop
        import aiohttp

        _async_client = aiohttp.ClientSession(os.environ[URL_VARIABLE], timeout=aiohttp.ClientTimeout(total=30),
                                              connector=aiohttp.TCPConnector(limit=0))  # fmt: skip
    async with _async_client.get(f"/work/{item}") as response:
        await response.read()
        return int(response.status)


def fetch_sync(item: int) -> int:
    """The same wait for a thread or a greenlet."""
    global _sync_client
    _started(item)
    with _sync_lock:
        if _sync_client is None:
            _sync_client = httpx.Client(base_url=os.environ[URL_VARIABLE], timeout=30,
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))  # fmt: skip
    return _sync_client.get(f"/work/{item}").status_code
