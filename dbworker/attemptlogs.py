"""The log records a handler writes during one attempt, kept with that attempt's history row.

``Capture`` is a ``logging`` handler a handler process puts on the root logger; between
``start()`` and the attempt's recording (or, for an async handler's items, inside each
item's ``attempt()``: a context variable) it keeps the newest records (bounded in count and
size, masked like every other text) and ``text()`` renders them as the JSON the history's
``logs`` column stores (``sql.history`` reads it back). Held in memory only: the history row
is written with the outcome (``sql.history``), so a rollback or a failure keeps them.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import datetime as dt
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from dbworker import redact

RECORDS = 50  # the newest records kept per attempt
MESSAGE_CHARS = 2_000  # one record's message (with its exception) is cut to this
TOTAL_CHARS = 16_000  # the stored JSON, as the history's error and traceback (tables.ERROR_MAX_CHARS)


class Records:
    """One attempt's records: the newest ``RECORDS`` kept, the older ones counted."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._records: collections.deque[dict[str, str]] = collections.deque(maxlen=RECORDS)
        self._dropped = 0

    def clear(self) -> None:
        with self._guard:
            self._records.clear()
            self._dropped = 0

    def add(self, kept: dict[str, str]) -> None:
        with self._guard:
            if len(self._records) == RECORDS:
                self._dropped += 1
            self._records.append(kept)

    def text(self) -> str | None:
        """What the attempt's history row keeps: ``encode`` of the records so far (None: none)."""
        with self._guard:
            return encode(list(self._records), self._dropped)


class Capture(logging.Handler):
    """Keeps the records logged during an attempt, at the levels the loggers let through.

    A sync handler process runs one attempt at a time: between ``start()`` and ``stop()``
    every record of the process (its threads' too) is the attempt's. An async one runs many
    at once: inside ``attempt()`` (entered by each item's task) the records logged in that
    context (the task, and the tasks and ``to_thread`` calls it starts, which copy it) go to
    that attempt only.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(logging.NOTSET)
        self._secrets = secrets
        self._process = Records()
        self._on = False
        # One variable per Capture: two runners in one process (``dbworker.testing``) keep apart.
        self._current: contextvars.ContextVar[Records | None] = contextvars.ContextVar(
            f"dbworker_attempt_logs_{id(self)}", default=None
        )

    def start(self) -> None:
        self._process.clear()
        self._on = True

    def stop(self) -> None:
        self._on = False

    def text(self) -> str | None:
        """The records since ``start()`` as the history row keeps them."""
        return self._process.text()

    @contextlib.contextmanager
    def attempt(self) -> Iterator[Records]:
        """The records of this context's attempt (one per async item), kept while inside."""
        records = Records()
        token = self._current.set(records)
        try:
            yield records
        finally:
            self._current.reset(token)

    def emit(self, record: logging.LogRecord) -> None:
        target = self._current.get()
        if target is None and self._on:
            target = self._process
        if target is None:
            return
        try:
            kept = entry(record, self._secrets)
        except Exception:  # noqa: BLE001 - a record that cannot be rendered is not the handler's failure
            return
        target.add(kept)


def entry(record: logging.LogRecord, secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """One record as kept: its time (UTC, ISO), level, logger and masked message (with its
    exception's traceback), cut to ``MESSAGE_CHARS``."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - bad %-arguments: keep the format string itself
        message = str(record.msg)
    if record.exc_info and record.exc_info[1] is not None:
        message = f"{message}\n{logging.Formatter().formatException(record.exc_info)}"
    at = dt.datetime.fromtimestamp(record.created, dt.UTC).replace(tzinfo=None)
    return {
        "at": at.isoformat(sep=" "),
        "level": record.levelname,
        "logger": record.name,
        "message": redact.redact(message, secrets, limit=MESSAGE_CHARS),
    }


def encode(records: list[dict[str, str]], dropped: int = 0) -> str | None:
    """``records`` as JSON of at most ``TOTAL_CHARS`` characters, oldest first; when some were
    left out (``dropped`` earlier ones, or more to fit the size) a first record says how many.
    None when there is nothing."""
    if not records and not dropped:
        return None
    kept = list(records)
    while True:
        left_out = dropped + len(records) - len(kept)
        head = [_note(left_out, kept[0]["at"] if kept else "")] if left_out else []
        text = json.dumps(head + kept, ensure_ascii=False, separators=(",", ":"))
        if len(text) <= TOTAL_CHARS or not kept:
            return text
        kept.pop(0)


def decode(text: str | None) -> list[dict[str, Any]]:
    """The records ``encode`` stored (an empty list for None or unreadable text)."""
    if not text:
        return []
    try:
        records = json.loads(text)
    except ValueError:
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _note(count: int, at: str) -> dict[str, str]:
    return {
        "at": at,
        "level": "WARNING",
        "logger": "dbworker",
        "message": f"{count} earlier log record(s) of this attempt not kept (at most {RECORDS} records, "
        f"{TOTAL_CHARS} characters per attempt)",
    }
