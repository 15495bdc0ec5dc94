"""A handler process ends when its coordinator does: its claims are then taken over elsewhere
once their leases expire, and an orphan must not linger (or commit) meanwhile.

The coordinator is not the process's parent (the fork server is; see ``spawning``), so its
pid is watched: on Linux through a pidfd, readable once the coordinator has ended; elsewhere
by looking every ``PARENT_CHECK_SECONDS``.
"""

from __future__ import annotations

import os
import select
import threading
import time

from dbworker.tuning import PARENT_CHECK_SECONDS

EXIT_ORPHANED = 3  # the coordinator died; the work is left for another to take over


def watch(coordinator_pid: int) -> None:
    """Exit this process (``EXIT_ORPHANED``) when ``coordinator_pid`` ends; from a daemon thread."""
    threading.Thread(target=_watch, args=(coordinator_pid,), name="dbworker-orphan-watch", daemon=True).start()


def _watch(coordinator_pid: int) -> None:
    try:
        pidfd = os.pidfd_open(coordinator_pid)
    except ProcessLookupError:
        os._exit(EXIT_ORPHANED)
    except (AttributeError, OSError):  # no pidfd here
        while _alive(coordinator_pid):
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(EXIT_ORPHANED)
    select.select([pidfd], [], [])
    os._exit(EXIT_ORPHANED)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
