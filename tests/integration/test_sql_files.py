"""The committed claim-path SQL is also what a live server's dialect compiles (``tests/sql``).

The files are compiled without a server, from a version; this checks that a real connection
(PostgreSQL and MariaDB newer than those versions, SQLite) sets its dialect up the same way.
"""

from __future__ import annotations

from tests.conftest import Database
from tests.sql import samples


def test_committed_sql_matches_the_live_dialect(db: Database) -> None:
    with db.engine.connect() as conn:
        live = samples.compiled(db.backend, conn.dialect)
    files = samples.committed()
    differ = sorted(f for f, text in live.items() if files.get(f) != text)
    assert not differ, f"{db.backend}: a live connection compiles these differently: {differ}"
