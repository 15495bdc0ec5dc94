"""Reads worker pods' /metrics: the backlog each reports and the handlers each is running.

``parse`` is pure (Prometheus text -> ``PodMetrics``); ``fetch`` does the one HTTP GET per pod
with a short timeout, so a hung pod costs one resync pass, never the operator. A body past
``MAX_BODY_BYTES`` is refused unread, and parsing runs in a worker thread within the same
timeout: a pod answering megabytes of text (11 MB once held the event loop for 3 s) delays no
other Worker's reconcile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# The dbworker metric names the operator reads (the `dbworker` command's public surface);
# copied, not imported: of the library the operator imports only dbworker.redact (pyproject's
# import-linter contracts), and a test reads them from the library's own exposition.
BACKLOG = "dbworker_backlog"
HANDLERS_ACTIVE = "dbworker_handlers_active"
TIMEOUT_SECONDS = 2.0  # the whole GET, read and parse of one pod
# A pod's dbworker exposition is a few KB per worker name (tens of KB for 64 names); 2 MiB is far
# past any real one and parses in well under the timeout.
MAX_BODY_BYTES = 2 * 1024 * 1024
_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class PodMetrics:
    """What one pod reported: backlog per worker name and handlers running now (all workers)."""

    backlog: Mapping[str, float] = field(default_factory=dict)
    handlers_active: float = 0.0


def parse(text: str) -> PodMetrics:
    """Read ``dbworker_backlog`` and ``dbworker_handlers_active`` from Prometheus text.

    Raises ``ValueError`` when the text is not Prometheus exposition format.
    """
    backlog: dict[str, float] = {}
    active = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == BACKLOG:
                worker = sample.labels.get("worker", "")
                backlog[worker] = backlog.get(worker, 0.0) + sample.value
            elif sample.name == HANDLERS_ACTIVE:
                active += sample.value
    return PodMetrics(backlog=backlog, handlers_active=active)


def total_backlog(reports: Iterable[PodMetrics]) -> int:
    """The Worker's backlog: per worker name the max over pods (each pod sees the same
    database-wide count, so adding pods would multiply it), summed over worker names."""
    per_worker: dict[str, float] = {}
    for report in reports:
        for worker, value in report.backlog.items():
            per_worker[worker] = max(per_worker.get(worker, 0.0), value)
    return int(sum(per_worker.values()))


def pod_url(pod: Mapping[str, Any], port: int) -> str | None:
    """The pod's metrics URL, or None while it has no IP or is not running."""
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or status.get("phase") != "Running":
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/metrics"


async def fetch(session: aiohttp.ClientSession, url: str) -> PodMetrics | None:
    """GET and parse one pod's metrics; None when it does not answer in time, answers more than
    ``MAX_BODY_BYTES`` or answers garbage. Parsing runs off the event loop."""
    try:
        async with asyncio.timeout(TIMEOUT_SECONDS), session.get(url) as response:
            if response.status != 200 or (response.content_length or 0) > MAX_BODY_BYTES:
                return None
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    return None
            return await asyncio.to_thread(parse, body.decode("utf-8", errors="replace"))
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None
