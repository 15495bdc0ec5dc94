"""Following the change table (MySQL/MariaDB, SQLite): payloads to the router, announcements out.

``sql.changes`` holds the table and its triggers. A ``ChangeFeed`` remembers the highest id
it has seen and hands every newer row's payload to ``on_payload`` (the router's
``notified``, as for a PostgreSQL notification). On MySQL/MariaDB ids are taken at insert
but become visible at commit, so a lower id can appear after a higher one: ids skipped
below the highest are looked for again for ``tuning.GAP_SECONDS`` (one that never appears
was rolled back). Rows older than ``tuning.KEEP_SECONDS`` are pruned by any reader.

MySQL/MariaDB have nothing to wait on, so a thread reads every ``tuning.POLL_SECONDS``: one
indexed range read of an empty range while idle. On SQLite the data_version watcher calls
``read_now`` when another connection committed. On both the thread writes the ``done:``
announcements, batched.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dbworker import redact, tuning
from dbworker.backoff import Backoff
from dbworker.sql import changes, dialects, notify
from dbworker.sql.dialects import connect
from dbworker.wakeups import outbox

log = logging.getLogger("dbworker")


class ChangeFeed:
    """One coordinator's reader of the change table, and the writer of its announcements."""

    def __init__(self, engine: Engine, on_payload: Callable[[str], None], on_unnamed: Callable[[], None], *,
                 secrets: tuple[str, ...]) -> None:  # fmt: skip
        self._engine = engine
        self._on_payload = on_payload
        self._on_unnamed = on_unnamed
        self._secrets = secrets
        self._read_lock = threading.Lock()  # the SQLite watcher and a loop may both read
        self._seen: int | None = None  # highest id read (None: not read yet)
        self._gaps: dict[int, float] = {}  # ids below it not seen yet -> when first missed
        self._marks: list[tuple[float, int]] = []  # (when, seen then): for pruning
        self._ended = outbox.EndedBatch()  # done announcements, as the Listener's
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dbworker-changes", daemon=True)

    # --- the polling thread (MySQL/MariaDB) -------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def drain(self) -> None:
        """Nothing to do: items that end while the loops drain are still announced."""

    def stop(self, deadline: float) -> None:
        """Ask the thread to end; not waited for (it only reads, prunes and announces)."""
        self._stop.set()

    def _run(self) -> None:
        # SQLite's data_version watcher calls read_now at each commit it sees: the thread
        # only writes announcements there. Elsewhere it holds one autocommitted connection:
        # a read is one statement, with no pool checkout around it.
        poll = not dialects.capabilities(self._engine.dialect).watches_commits
        errors = Backoff(tuning.RECONNECT_FIRST_WAIT, tuning.RECONNECT_MAX_WAIT, jitter=0.5)
        while not self._stop.is_set():
            try:
                with self._engine.connect() as held:
                    conn = held.execution_options(isolation_level="AUTOCOMMIT")
                    while not self._stop.wait(tuning.POLL_SECONDS):
                        self._flush(conn)
                        if poll:
                            self.read(conn)
                        errors.reset()
            except Exception as exc:  # noqa: BLE001 - polling covers the gap; retried
                log.warning("dbworker: change table reader error: %s", redact.describe(exc, self._secrets))
                self._stop.wait(errors.next())

    # --- reading (any thread) --------------------------------------------------------------
    def read_now(self) -> None:
        """``read``, for a watcher's thread. On an error every loop looks (a wake-up naming no
        row), so what the commit changed is not left to the next wrap."""
        try:
            self.read()
        except Exception as exc:  # noqa: BLE001 - the loops look instead
            log.warning("dbworker: change table reader error: %s", redact.describe(exc, self._secrets))
            self._on_unnamed()

    def prime(self) -> bool:
        """Learn where the table stands (the first ``read`` does it otherwise); False if the
        database could not be read."""
        try:
            self.read()
        except Exception as exc:  # noqa: BLE001 - the first read of the thread tries again
            log.info("dbworker: could not read the change table: %s", redact.describe(exc, self._secrets))
            return False
        return True

    def read(self, conn: sa.Connection | None = None) -> int:
        """Hand every new row's payload to ``on_payload``; return how many there were.
        ``conn``: the polling thread's own (else one from the pool)."""
        with self._read_lock, contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(connect(self._engine))
            now = time.monotonic()
            if self._seen is None:
                self._seen = changes.top(conn)  # what came before is the sweep's to find ...
                # ... but for rows of transactions still open, whose lower ids appear later.
                self._gaps = dict.fromkeys(changes.missing_below(conn, self._seen, tuning.START_GAPS), now)
                conn.rollback()
                return 0
            gaps = [g for g, at in self._gaps.items() if now - at < tuning.GAP_SECONDS]
            rows = changes.read(conn, self._seen, gaps, tuning.READ_LIMIT)
            conn.rollback()  # end the read's transaction: the next sees later commits
            self._gaps = {g: self._gaps[g] for g in gaps}
            for row_id, _ in rows:
                self._gaps.pop(row_id, None)
                if row_id > self._seen + 1:
                    for missing in range(self._seen + 1, min(row_id, self._seen + 1 + tuning.MAX_GAPS)):
                        self._gaps.setdefault(missing, now)
                self._seen = max(self._seen, row_id)
            if len(self._gaps) > tuning.MAX_GAPS:
                self._gaps = dict(sorted(self._gaps.items())[-tuning.MAX_GAPS :])
            try:
                self._prune(conn, now)
            except Exception as exc:  # noqa: BLE001 - what was read is still handed on
                log.warning("dbworker: pruning the change table failed: %s", redact.describe(exc, self._secrets))
        if len(rows) >= tuning.READ_LIMIT:
            # More than a read takes: the loops sweep instead (a wake-up naming no row),
            # and the next read goes on from here.
            self._on_unnamed()
        else:
            for _, payload in rows:
                self._on_payload(payload)
        return len(rows)

    def _prune(self, conn: sa.Connection, now: float) -> None:
        assert self._seen is not None
        keep = tuning.KEEP_SECONDS
        if not self._marks or now - self._marks[-1][0] >= keep / 4:
            self._marks.append((now, self._seen))
        old = [seen for when, seen in self._marks if now - when >= keep]
        if old:
            self._marks = [(w, s) for w, s in self._marks if now - w < keep]
            # At READ COMMITTED (``connect``'s on MySQL/MariaDB): no gap locks that would
            # hold up the triggers' inserts.
            changes.prune(conn, max(old))

    # --- announcing ------------------------------------------------------------------------
    def announce_done(self, worker: str, key: str | None = None) -> None:
        """Tell other coordinators an item of ``worker`` ended (``key`` as text): written by
        the polling thread within a read's interval, batched like the Listener's."""
        self._ended.add(worker, key)

    def _flush(self, conn: sa.Connection) -> None:
        ended = self._ended.take()
        if ended:
            try:
                changes.write(conn, notify.done_payloads(ended))
                conn.commit()
            except Exception:
                self._ended.put_back(ended)  # written once the database answers
                raise
