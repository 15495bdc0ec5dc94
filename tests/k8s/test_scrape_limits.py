"""The operator's read of a pod's /metrics is bounded: a body past the cap is refused unread,
and parsing runs off the event loop within the timeout (scrape.fetch)."""

from __future__ import annotations

import asyncio
import threading
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
    """A parse that outlasts the timeout: fetch gives up at the timeout, and the event loop keeps
    running meanwhile. The parse waits on an event the test sets only afterwards, so the test
    reads no clock: on the event loop's thread it would block every tick until its own limit."""
    monkeypatch.setattr(scrape, "TIMEOUT_SECONDS", 0.5)
    release = threading.Event()

    def slow_parse(text: str) -> scrape.PodMetrics:
        release.wait(timeout=5.0)  # stands in for parsing a large body: work holding the calling thread
        return scrape.PodMetrics()

    monkeypatch.setattr(scrape, "parse", slow_parse)

    async def answer(_: web.Request) -> web.StreamResponse:
        return web.Response(text=ONE_LINE, content_type="text/plain")

    async def run() -> tuple[scrape.PodMetrics | None, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async with _pod(answer) as url:
            tick = asyncio.create_task(ticker())
            report = await _fetch(url)
            release.set()  # let the parse's thread end, so asyncio.run's shutdown need not wait for it
            tick.cancel()
        return report, ticks

    try:
        report, ticks = asyncio.run(run())
    finally:
        release.set()
    assert report is None, "fetch waited for a parse past its timeout"
    assert ticks > 0, "the event loop stood still while the body was parsed"
