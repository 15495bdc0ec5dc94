"""How the ``dbworker`` command fails: exit codes, reason tokens, ``CommandError``, the termination log.

Every other pod module raises ``CommandError``; ``cli`` catches it, prints ``dbworker: <message>``
on stderr and writes ``dbworker[<Reason>]: <message>`` here, where Kubernetes reads a container's
last words. The reason is a stable token for the operator; the message is for humans and may change.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import exc as sa_exc

from dbworker import logs, redact

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_DATABASE = 3

# Reason tokens of the termination log (CamelCase, never reworded: the operator matches them).
# Exit 2 is UnknownWorker for a --worker or --concurrency name the code does not register and
# BadInput for any other bad flag, variable, application or schema; exit 3 and 1 have one each.
UNKNOWN_WORKER = "UnknownWorker"
BAD_INPUT = "BadInput"
DATABASE_UNREACHABLE = "DatabaseUnreachable"
UNEXPECTED = "Unexpected"
REASONS = (UNKNOWN_WORKER, BAD_INPUT, DATABASE_UNREACHABLE, UNEXPECTED)
_REASON_OF_CODE = {EXIT_USAGE: BAD_INPUT, EXIT_DATABASE: DATABASE_UNREACHABLE}

TERMINATION_LOG = "/dev/termination-log"
# Tests point this elsewhere; in Kubernetes the kubelet creates /dev/termination-log.
TERMINATION_LOG_ENV = "DBWORKER_TERMINATION_LOG"


class CommandError(Exception):
    """One line for stderr, the exit code that goes with it and the reason token for the operator.

    ``reason`` defaults to the one of ``code``: ``BadInput`` for 2, ``DatabaseUnreachable`` for 3,
    ``Unexpected`` otherwise.
    """

    def __init__(self, message: str, code: int = EXIT_USAGE, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason or reason_of(code)


def reason_of(code: int) -> str:
    """The reason token that goes with exit ``code`` when the error names none."""
    return _REASON_OF_CODE.get(code, UNEXPECTED)


def stderr_line(message: str) -> str:
    """``dbworker: <message>`` on one line, passwords masked, control characters escaped."""
    return "dbworker: " + _safe(message)


def termination_line(message: str, reason: str) -> str:
    """``dbworker[<Reason>]: <message>`` on one line, passwords masked, control characters escaped."""
    return f"dbworker[{reason}]: " + _safe(message)


def write(line: str) -> None:
    """Put ``line`` where Kubernetes reads a container's last words, if that file is writable."""
    path = os.environ.get(TERMINATION_LOG_ENV) or TERMINATION_LOG
    # Only an existing file: creating /dev/termination-log outside Kubernetes helps nobody.
    if os.path.isfile(path) and os.access(path, os.W_OK):
        try:
            with open(path, "w") as f:
                f.write(line + "\n")
        except OSError:
            pass


def database_code(exc: BaseException) -> int:
    """Exit 3 when ``exc`` says the database did not answer, 1 for any other failure."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return EXIT_DATABASE
    return EXIT_UNEXPECTED


def one_line(exc: BaseException) -> str:
    """``exc`` as the first line of its description, passwords masked, for a ``CommandError``."""
    return first_line(redact.describe(exc, logs.masked()))


def first_line(text: Any) -> str:
    """The first line of ``text``, cut to 300 characters."""
    lines = str(text or "").strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= 300 else first[:297] + "..."


def _safe(message: str) -> str:
    return redact.printable(redact.redact(message, logs.masked()).replace("\n", " "))
