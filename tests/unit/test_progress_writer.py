"""``progress.Coalesced``: an async item's reports, noted at once and written newest first by
one task of their own, the last one before the outcome (``flush``)."""

from __future__ import annotations

import asyncio

from dbworker import progress


class Slow:
    """A writer that answers only when let go, recording what it wrote."""

    def __init__(self) -> None:
        self.written: list[tuple[float | None, str | None]] = []
        self.go = asyncio.Event()

    async def __call__(self, fraction: float | None, note: str | None) -> None:
        await self.go.wait()
        self.written.append((fraction, note))


def test_reports_faster_than_the_writes_are_coalesced_and_flushed_in_order() -> None:
    async def scenario() -> list[tuple[float | None, str | None]]:
        write = Slow()
        writer = progress.Coalesced(write)
        with progress.running(writer):
            for k in range(1, 101):
                progress.report_progress(k / 100, f"step {k}")  # never waits
        await asyncio.sleep(0)
        write.go.set()
        await writer.flush()
        return write.written

    written = asyncio.run(scenario())
    assert written[-1] == (1.0, "step 100") and len(written) <= 2  # the first one, then the newest


def test_a_report_from_a_thread_is_written() -> None:
    async def scenario() -> list[tuple[float | None, str | None]]:
        write = Slow()
        write.go.set()
        writer = progress.Coalesced(write)
        with progress.running(writer):
            await asyncio.to_thread(progress.report_progress, 0.3)  # the thread sees the task's context
        await writer.flush()
        return write.written

    assert asyncio.run(scenario()) == [(0.3, None)]


def test_a_lost_claim_drops_what_is_not_written_yet() -> None:
    async def scenario() -> list[tuple[float | None, str | None]]:
        write = Slow()
        writer = progress.Coalesced(write)
        with progress.running(writer):
            progress.report_progress(0.1)
            await asyncio.sleep(0)  # its write is under way
            progress.report_progress(0.2)
            writer.drop()
        write.go.set()
        await writer.flush()
        return write.written

    assert asyncio.run(scenario()) == [(0.1, None)]
