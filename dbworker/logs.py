"""The command's logging: text or JSON lines on stderr, passwords masked.

Every record passes through ``redact`` before it is written, so a database URL or a driver
error quoting one never shows its password. A record's message, exception and stack are each
cut to ``redact.MAX_CHARS`` before anything else reads them, and text lines show terminal
control characters as escapes (``\\x1b``): a handler's error cannot drive the reader's
terminal. The library itself only logs to ``dbworker.*`` loggers and configures nothing; the
command calls ``setup()``, which also serves the application's own loggers when the
application configured none, and handler processes repeat it (``active()``), so what
handlers log reaches the pod's log in the same format, tagged with their worker.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

from dbworker import redact, tracing

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Passwords learned after setup (from the application's URL); masked in every line.
_MASKED: set[str] = set()
# (level, format) of the command's setup(), for handler processes to repeat; None when
# the library runs inside an application, whose logging is its own business.
_ACTIVE: tuple[str, str] | None = None


def mask(*secrets: str) -> None:
    """Mask these strings in every line from now on (and in the command's error line)."""
    _MASKED.update(s for s in secrets if s)


def masked() -> tuple[str, ...]:
    return tuple(_MASKED)


class _Redacting(logging.Formatter):
    """Formats as the base class would (each part cut to its bound first), then masks
    passwords in the whole line and escapes terminal control characters."""

    def __init__(self, fmt: str | None, *, secrets: tuple[str, ...]) -> None:
        super().__init__(fmt)
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return redact.printable(
            redact.redact(super().format(self.bounded(record)), self._secrets + masked())
        )

    def bounded(self, record: logging.LogRecord) -> logging.LogRecord:
        """A copy of ``record`` whose message, exception and stack are each cut to their bound."""
        copy = logging.makeLogRecord(record.__dict__)
        copy.msg, copy.args = redact.clip(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            copy.exc_text = self.formatException(record.exc_info)
        copy.exc_text = redact.clip(copy.exc_text) if copy.exc_text else copy.exc_text
        copy.stack_info = redact.clip(record.stack_info) if record.stack_info else record.stack_info
        return copy


class _Json(_Redacting):
    """One JSON object per line: time, level, logger, message, and exception text if any.

    Each text is masked (and so bounded) on its own: a cut line would not parse.
    """

    def format(self, record: logging.LogRecord) -> str:
        record = self.bounded(record)
        secrets = self._secrets + masked()
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact.redact(record.getMessage(), secrets),
        }
        if record.exc_text:
            entry["exception"] = redact.redact(record.exc_text, secrets)
        for key in ("worker", "outcome"):
            if hasattr(record, key):
                entry[key] = redact.redact(str(getattr(record, key)), secrets)
        ids = getattr(record, "otel_ids", None)
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        return json.dumps(entry, default=str)


class _Tag(logging.Filter):
    """Marks records of a handler process with its worker (a field of JSON lines)."""

    def __init__(self, worker: str) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = self._worker
        return True


class _TraceIds(logging.Filter):
    """Marks each record with the ids of the span current where it was logged (tracing on):
    a filter, since the handler may format it on another thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "otel_ids"):
            record.otel_ids = tracing.current_ids()
        return True


def active() -> tuple[str, str] | None:
    """The (level, format) that ``setup()`` installed in this process, if it was called."""
    return _ACTIVE


def restore(previous: tuple[str, str] | None) -> None:
    """Make ``active()`` answer ``previous`` again (tests that undo a ``setup()``)."""
    global _ACTIVE
    _ACTIVE = previous


def check_level(level: str) -> str:
    """``level`` upper-cased; ``ValueError`` naming the allowed values otherwise."""
    upper = level.strip().upper()
    if upper not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    return upper


def check_format(fmt: str) -> str:
    """``fmt`` lower-cased; ``ValueError`` naming the allowed values otherwise."""
    lower = fmt.strip().lower()
    if lower not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")
    return lower


def setup(
    *,
    level: str = "INFO",
    fmt: str = "text",
    secrets: tuple[str, ...] = (),
    stream: TextIO | None = None,
    worker: str | None = None,
) -> logging.Handler:
    """Send the ``dbworker`` logger to ``stream`` (stderr) at ``level`` in ``fmt``.

    The root logger gets the same handler and level unless the application set up a
    handler of its own there, so the application's records (its handlers' included) are
    not lost. ``secrets`` are extra strings to mask (e.g. the password of the
    application's URL); ``worker`` tags every record (in handler processes). Returns the
    installed handler. Raises ``ValueError`` for an unknown level or format.
    """
    global _ACTIVE
    level = check_level(level)
    fmt = check_format(fmt)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(
        _Json(None, secrets=secrets) if fmt == "json" else _Redacting(_TEXT, secrets=secrets)
    )
    logger = logging.getLogger("dbworker")
    for old in list(logger.handlers):
        if getattr(old, "_dbworker_setup", False):
            logger.removeHandler(old)
    handler._dbworker_setup = True  # type: ignore[attr-defined]
    if worker is not None:
        handler.addFilter(_Tag(worker))
    if fmt == "json" and tracing.available():
        handler.addFilter(_TraceIds())
    logger.addHandler(handler)
    logger.setLevel(level)
    # The command owns stderr: records must not also reach a root handler set by the app.
    logger.propagate = False
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_dbworker_setup", False)]
    if len(ours) == len(root.handlers):  # the application configured no logging of its own
        for old in ours:
            root.removeHandler(old)
        root.addHandler(handler)
        root.setLevel(level)
    _ACTIVE = (level, fmt)
    return handler
