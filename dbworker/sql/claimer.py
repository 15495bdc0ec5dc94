"""Who claims: the claiming process's identity, written with every claim (``claimed_by``).

``host:pid`` of the coordinator process that took the item (a pod's host name is its pod
name), so a console or an operator can say which pod and process hold a running item.
"""

from __future__ import annotations

import functools
import os
import socket

from dbworker.sql.tables import CLAIMER_LENGTH


@functools.cache
def _host() -> str:
    return socket.gethostname() or "unknown"


def identity(pid: int | None = None) -> str:
    """``host:pid`` of this process (or of process ``pid`` on this host), cut to fit the
    column (the pid is always kept)."""
    pid_text = str(os.getpid() if pid is None else pid)
    return f"{_host()[: CLAIMER_LENGTH - len(pid_text) - 1]}:{pid_text}"


def split(claimed_by: str | None) -> tuple[str | None, int | None]:
    """``claimed_by`` as (host, pid); (None, None) when nothing was recorded."""
    if not claimed_by:
        return None, None
    host, _, pid = claimed_by.rpartition(":")
    return (host, int(pid)) if host and pid.isdigit() else (claimed_by, None)
