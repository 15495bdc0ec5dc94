"""A connection of one thread's own, out of the pool, kept until stopped: the wake-up watchers'.

Watchers (PostgreSQL's LISTEN, SQLite's data_version) hold a connection for their whole
life. It never goes back to the engine's pool; after any error it is closed and a new one
is opened with backoff, while polling covers the gap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine

from dbworker import redact, tuning
from dbworker.backoff import Backoff

log = logging.getLogger("dbworker")


def serve(engine: Engine, use: Callable[[Any], None], *, stop: threading.Event, what: str,
          secrets: tuple[str, ...]) -> None:  # fmt: skip
    """Call ``use(driver_connection)`` until ``stop`` is set; reconnect after errors (logged as ``what``)."""
    errors = Backoff(tuning.RECONNECT_FIRST_WAIT, tuning.RECONNECT_MAX_WAIT, jitter=0.5)
    while not stop.is_set():
        raw: Any = None
        try:
            raw = engine.raw_connection()
            conn = raw.driver_connection
            raw.detach()  # this thread's for as long as it runs: never back to the pool
            errors.reset()
            use(conn)
        except Exception as exc:  # noqa: BLE001 - polling covers the gap; retried
            log.warning("dbworker: %s error: %s", what, redact.describe(exc, secrets))
            stop.wait(errors.next())
        finally:
            if raw is not None:
                try:
                    raw.close()
                except Exception:  # noqa: BLE001
                    pass
