"""An attempt that failed: retried while the worker's ``Retry`` allows another, else failed for
good. The policy is ``retries``'; the transitions it picks between (``fail``,
``wait_for_retry``) are ``items``'.
"""

from __future__ import annotations

import random

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dbworker import retries
from dbworker.messages import Outcome
from dbworker.sql import history, transactions
from dbworker.sql.items import Claim, fail, wait_for_retry
from dbworker.sql.states import fence


def attempt_of(conn: Connection, table: sa.Table, claim: Claim) -> int | None:
    """The attempt ``claim`` runs (1-based), or None when it is no longer the item's claim."""
    found = conn.execute(sa.select(table.c.attempts).where(fence(table, claim.source_id, claim.token))).first()
    return None if found is None else max(1, int(found[0] or 0))


def failed_attempt(
    conn: Connection,
    table: sa.Table,
    claim: Claim,
    *,
    error: str,
    traceback: str | None = None,
    retry: retries.Retry | None = None,
    exc: BaseException | None = None,
    attempt: int | None = None,
    final: Outcome = Outcome.FAILED,
    attempt_record: history.Attempt | None = None,
) -> tuple[Outcome, float | None]:
    """An attempt of ``claim`` failed: ``wait_for_retry`` when the worker's ``retry`` allows
    another (``Outcome.RETRIED`` and the delay in seconds), else ``fail`` (``final``: what
    the failure is called, failed, crashed or timed_out), or ``Outcome.LOST`` when the claim
    is no longer current. ``exc``: the handler's exception (None: its process died or timed
    out); ``attempt``: its number when the caller knows it; ``attempt_record``: its history
    row goes in with the outcome, in the same transaction. Commits.
    """
    with transactions.committed(conn):
        if retry is not None and attempt is None:
            attempt = attempt_of(conn, table, claim)
            if attempt is None:
                return Outcome.LOST, None
        wait = None if attempt is None else retries.decide(retry, attempt=attempt, exc=exc, draw=random.random())
        if wait is None:
            done = fail(conn, table, claim, error=error, traceback=traceback)
        else:
            done = wait_for_retry(conn, table, claim, wait, error=error, traceback=traceback)
        if done and attempt_record is not None:
            outcome = final if wait is None else Outcome.RETRIED
            try:  # a source row gone (the failure may be that) has no history: the outcome stays
                with conn.begin_nested():
                    attempt_record.record(conn, claim.source_id, outcome.value, error=error, traceback=traceback)
            except sa.exc.IntegrityError:
                pass
    if not done:
        return Outcome.LOST, None
    return (final, None) if wait is None else (Outcome.RETRIED, wait)
