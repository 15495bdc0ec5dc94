"""A work row's states as stored, the fence every fenced write shares, and the error clip.

The states are ``contract.ExecutionStatus``'s values (no record at all: never claimed).
``sql.items`` makes every change of state; ``statements`` builds the SQL it runs.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from dbworker.contract import ExecutionStatus
from dbworker.sql import tables

WORKING = ExecutionStatus.WORKING.value
UNFINISHED = ExecutionStatus.UNFINISHED.value
FINISHED = ExecutionStatus.FINISHED.value
FAILED = ExecutionStatus.FAILED.value
DONE = (FINISHED, FAILED)  # final: no claim takes them (a reset brings a failed one back)
CANCELLED = "cancelled"  # the error text, and the claim token, of a cancelled item


def fence(table: sa.Table, source_id: Any, token: Any) -> sa.ColumnElement[bool]:
    """The record of ``source_id`` is WORKING under the claim ``token`` (values or bound
    parameters): a write under it changes nothing once the claim is no longer current."""
    w = table.c
    return sa.and_(w.source_id == source_id, w.claim_token == token, w.execution_status == WORKING)


def clip(text: str | None) -> str | None:
    """``text`` cut to what the error and traceback columns keep (``tables.ERROR_MAX_CHARS``)."""
    if text is not None and len(text) > tables.ERROR_MAX_CHARS:
        return text[: tables.ERROR_MAX_CHARS - 20] + "\n... (truncated)"
    return text
