"""The one masker, from the library: texts bound for a Worker's status, Events and logs.

Pod termination messages and API server errors may quote a database URL or a driver's
``password=...``; ``dbworker.redact`` masks both (the only library module the operator
imports). This module adds what a status field needs on top: one stripped, bounded string.
"""

from __future__ import annotations

from dbworker import redact as library

# Room for a termination message in a condition or Event without letting a log tail flood it.
MESSAGE_LIMIT = 500


def message(text: str, *, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` with passwords masked and surrounding space stripped, cut to ``limit`` characters."""
    masked = library.redact(text.strip())
    return masked if len(masked) <= limit else masked[: limit - 3] + "..."
