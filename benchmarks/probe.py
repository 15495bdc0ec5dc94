"""What every system's handlers share: where they report, and the settings they read.

Handlers of the latency workload push `<item> <time.time()>` to one Redis list as their first
act, identically in every system, so the benchmark can pair it with the insert's commit time.
Settings reach worker processes as BENCH_* environment variables set by the benchmark.
"""

from __future__ import annotations

import os
import time

import redis

LATENCY_KEY = "bench:latency"
FINISH_KEY = "bench:finish"  # dep_first's handler ends (the dependent workload)
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"

_redis: redis.Redis | None = None


def pg_dsn() -> str:
    return os.environ.get("BENCH_PG_DSN", DEFAULT_PG_DSN)


def redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)


def _client() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(redis_url())
    return _redis


def handler_started(item: int) -> None:
    """Record that the handler for ``item`` starts now (latency workload only)."""
    _client().rpush(LATENCY_KEY, f"{item} {time.time():.6f}")


def handler_finished(item: int) -> None:
    """Record that the handler for ``item`` returns its outcome now (dependent workload)."""
    _client().rpush(FINISH_KEY, f"{item} {time.time():.6f}")


def read_starts(client: redis.Redis, key: str = LATENCY_KEY) -> dict[int, float]:
    """Every recorded handler start (or end, with FINISH_KEY): item -> wall-clock seconds
    (the first one wins)."""
    starts: dict[int, float] = {}
    for raw in client.lrange(key, 0, -1):
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        item_text, ts_text = text.split()
        starts.setdefault(int(item_text), float(ts_text))
    return starts
