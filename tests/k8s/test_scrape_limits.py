"""The operator's read of a pod's /metrics is bounded: a body past the cap is refused unread,
and parsing runs off the event loop within the timeout (scrape.fetch)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from dbworker_operator import scrape

ONE_LINE = 'dbworker_backlog{worker="hash"} 12.0\n'


@asynccontextmanager
async def _pod(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """A fake pod serving ``handler`` at /metrics; yields its URL."""
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        await runner.cleanup()


async def _fetch(url: str) -> scrape.PodMetrics | None:
    async with aiohttp.ClientSession() as session:
        return await scrape.fetch(session, url)


def test_a_body_past_the_cap_is_refused_with_or_without_a_length() -> None:
    big = (ONE_LINE * (scrape.MAX_BODY_BYTES // len(ONE_LINE) + 10)).encode()

    async def sized(_: web.Request) -> web.StreamResponse:
        return web.Response(body=big, content_type="text/plain")

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(big), 256 * 1024):
            await response.write(big[start:start + 256 * 1024])
        await response.write_eof()
        return response

    async def run() -> list[Any]:
        found = []
        for handler in (sized, streamed):
            async with _pod(handler) as url:
                found.append(await _fetch(url))
        return found

    assert asyncio.run(run()) == [None, None]


def test_a_body_under_the_cap_is_read_and_parsed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real_parse = scrape.parse

    def parse(text: str) -> scrape.PodMetrics:
        threads.append(threading.get_ident())
        return real_parse(text)

    monkeypatch.setattr(scrape, "parse", parse)

    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(text=ONE_LINE, content_type="text/plain")

    async def run() -> tuple[scrape.PodMetrics | None, int]:
        async with _pod(answer) as url:
            return await _fetch(url), threading.get_ident()

    report, loop_thread = asyncio.run(run())
    assert report is not None and report.backlog == {"hash": 12.0}
    assert threads and loop_thread not in threads, "parsing ran on the event loop's thread"


def test_a_slow_parse_never_blocks_the_event_loop_and_counts_against_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A parse that takes longer than the timeout: fetch gives up at the timeout, and the loop
    keeps running meanwhile (a ticker's longest gap stays far below the parse's duration)."""
    monkeypatch.setattr(scrape, "TIMEOUT_SECONDS", 0.5)

    def slow_parse(text: str) -> scrape.PodMetrics:
        time.sleep(2.0)  # stands in for parsing a large body: CPU work holding the calling thread
        return scrape.PodMetrics()

    monkeypatch.setattr(scrape, "parse", slow_parse)

    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(text=ONE_LINE, content_type="text/plain")

    async def run() -> tuple[scrape.PodMetrics | None, float, float]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async with _pod(answer) as url:
            tick = asyncio.create_task(ticker())
            started = time.monotonic()
            report = await _fetch(url)
            took = time.monotonic() - started
            stop.set()
            await tick
        return report, took, max(gaps)

    report, took, longest_gap = asyncio.run(run())
    assert report is None
    assert took < 1.9, f"fetch waited {took:.2f}s for a parse past its timeout"
    assert longest_gap < 1.9, f"the event loop stalled {longest_gap:.2f}s"
