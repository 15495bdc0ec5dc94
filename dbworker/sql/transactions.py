"""The one commit-or-roll-back helper for dbworker's own short transactions.

Callers (``claims``, ``attempts``) run their statements inside ``committed(conn)``; which
statements, and the locks they take, are theirs and ``statements``'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy.engine import Connection


@contextlib.contextmanager
def committed(conn: Connection) -> Iterator[None]:
    """Commit what the block ran on ``conn``; roll it back if the block or the commit raises.

    Anything raised counts (``BaseException``): callers go on using ``conn`` (a claim loop
    runs several rounds on one), so no half-done transaction, or its row locks, may outlive
    the block.
    """
    try:
        yield
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
