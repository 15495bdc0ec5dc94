"""The I/O of the I/O-bound benchmark (benchmarks/io_bound.py), the same for every system's
handler: record the handler's start (``probe.handler_started``, the pick-up probe), then GET
``/work/<item>`` from the local HTTP server, which answers after a fixed delay. The handler
then writes one row its own system's way. One HTTP client per process (httpx, async or sync:
Celery's gevent and thread pools wait on the sync one).
"""

from __future__ import annotations

import os
import threading

import httpx

from benchmarks import probe

URL_VARIABLE = "BENCH_IO_URL"  # the slow HTTP server's address, set by io_bound for every pod

_async_client: httpx.AsyncClient | None = None
_sync_client: httpx.Client | None = None
_sync_lock = threading.Lock()


async def fetch(item: int) -> int:
    """The handler's wait, on the running event loop; the response's status."""
    global _async_client
    probe.handler_started(item)
    if _async_client is None:  # one client per process and its event loop
        _async_client = httpx.AsyncClient(base_url=os.environ[URL_VARIABLE], timeout=30,
                                          limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))  # fmt: skip
    return (await _async_client.get(f"/work/{item}")).status_code


def fetch_sync(item: int) -> int:
    """The same wait for a thread or a greenlet."""
    global _sync_client
    probe.handler_started(item)
    with _sync_lock:
        if _sync_client is None:
            _sync_client = httpx.Client(base_url=os.environ[URL_VARIABLE], timeout=30,
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))  # fmt: skip
    return _sync_client.get(f"/work/{item}").status_code
