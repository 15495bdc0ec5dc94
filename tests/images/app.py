"""tests.apps.basic as a module `dbworker run` loads: ``tests.images.app:coordinator``.

The worker image runs it with the repository's tests/ mounted read-only beside /app: the
image stays the shipped one, and the drain checks get handlers that wait (``dbwait``) or
ignore SIGTERM (``hang``). The test creates the tables first, from the host.
"""

from __future__ import annotations

import os

from tests.apps import basic

coordinator = basic.build(os.environ["DATABASE_URL"], app_tables=False, work_tables=False,
                          poll_seconds=0.05, max_poll_seconds=0.5)
