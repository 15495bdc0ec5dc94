"""The life of one work row: every change of its state, one function per transition.

The only module that writes work rows. Each transition is a conditional write whose row
count says whether it happened; the fenced ones (``states.fence``) change nothing once the
claim they name is no longer current. ``TRANSITIONS`` lists them with the states they go
from and to; ``docs/design.md`` draws the same diagram, and a unit test holds the two
together. Which rows to claim is ``claims``'; the SQL each runs is ``statements``'.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from dbworker.contract import ExecutionStatus
from dbworker.sql import dialects, history, notify, statements, transactions
from dbworker.sql.states import CANCELLED, DONE, FAILED, UNFINISHED, WORKING, clip, fence
from dbworker.tuning import KEYS_PER_STATEMENT

NEW = "[*]"  # no work record yet: never claimed

# transition: (states it starts from, the state it ends in). The state diagram in
# docs/design.md draws exactly these (tests/unit/test_items.py).
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "claim": ((NEW, UNFINISHED), WORKING),  # a first claim, or of an unfinished item done waiting
    "take_over": ((WORKING,), WORKING),  # a claim whose lease expired (its process died)
    "renew": ((WORKING,), WORKING),  # the lease extended
    "finish": ((WORKING,), ExecutionStatus.FINISHED.value),
    "unfinish": ((WORKING,), UNFINISHED),  # Unfinished(): the next step, maybe after a wait
    "fail": ((WORKING,), FAILED),
    "wait_for_retry": ((WORKING,), UNFINISHED),  # a failed attempt the worker's Retry repeats
    "give_back": ((WORKING,), UNFINISHED),  # claimable again at once
    "cancel": ((NEW, UNFINISHED, WORKING), FAILED),
    "reset": ((FAILED,), UNFINISHED),
    "forget": ((ExecutionStatus.FINISHED.value, FAILED), NEW),  # a schedule's old ticks pruned
}


@dataclass(frozen=True)
class Claim:
    """One taken item: its source key, the claim's token, and whether it took over a dead claim."""

    source_id: Any
    token: str
    taken_over: bool = False
    # The W3C traceparent of the coordinator's span of this claim (tracing on), for the
    # handler process's span to be its child; never compared.
    trace: str | None = field(default=None, compare=False)
    # Read by a traced one-statement claim (``claims.claim``'s ``traced``): the attempt this
    # claim starts and its writer's traceparent (None: none stored), so that the coordinator's
    # span of the item needs no read of its own (``engine.spans``); never compared.
    attempt: int | None = field(default=None, compare=False)
    parent: str | None = field(default=None, compare=False)


# --- claim, take_over ----------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """Records as committed (``caps.reads_records_first``): the keys ``again`` can take, and
    those ``over`` can."""

    again: frozenset[Any]
    over: frozenset[Any]


def _recorded(conn: Connection, st: statements.Prebuilt, source_ids: Sequence[Any]) -> Recorded | None:
    """One read of the records of ``source_ids``, without locks, where the server needs it
    (else None, and every write is tried)."""
    if st.recorded is None or not source_ids:
        return None
    rows = conn.execute(st.recorded, {"dbw_sids": list(source_ids)}).all()
    return Recorded(frozenset(r[0] for r in rows if r[1]), frozenset(r[0] for r in rows if r[2]))


def claim(
    conn: Connection, st: statements.Prebuilt, source_id: Any, lease: Any, *, token: str | None = None
) -> Claim | None:
    """Take one candidate (see ``claim_each``); with ``token`` (a limited claim's, named by its
    slots) that token. No commit (the claim round commits)."""
    taken = claim_each(conn, st, [source_id], lease, tokens=None if token is None else [token])
    return taken[0] if taken else None


def claim_each(
    conn: Connection, st: statements.Prebuilt, source_ids: Sequence[Any], lease: Any, *,
    tokens: Sequence[str] | None = None,
) -> list[Claim]:  # fmt: skip
    """Take candidates one statement each: a first claim of each; of those that have a record,
    a claim of an unfinished item, else ``take_over``. Returns the claims won, in the order
    of ``source_ids``; ``tokens``: their tokens (a limited round's), else new ones. No commit.

    MySQL/MariaDB (``caps.reads_records_first``): a first claim inserts only where no record
    is committed, and the records of the rest are read (one read without locks) so that
    only a write that can win is tried: there an UPDATE by key waits on a record another
    transaction holds (a handler recording its outcome) even when the committed row cannot
    match, and this claim holds the item's source row, which that handler needs.
    """
    tokens = list(tokens) if tokens is not None else [str(uuid.uuid4()) for _ in source_ids]
    won: dict[Any, Claim] = {}
    others: list[tuple[Any, str]] = []  # that have a record
    for source_id, token in zip(source_ids, tokens, strict=True):
        params = {"dbw_sid": source_id, "dbw_token": token, "dbw_lease": lease}
        if dialects.inserted(conn.execute(st.first, params)):
            won[source_id] = Claim(source_id, token)
        else:
            others.append((source_id, token))
    seen = _recorded(conn, st, [source_id for source_id, _ in others])
    for source_id, token in others:
        params = {"dbw_sid": source_id, "dbw_token": token, "dbw_lease": lease}
        if (seen is None or source_id in seen.again) and conn.execute(st.again, params).rowcount == 1:
            won[source_id] = Claim(source_id, token)
        elif seen is None or source_id in seen.over:
            got = take_over(conn, st, source_id, lease, token=token)
            if got is not None:
                won[source_id] = got
    return [won[source_id] for source_id in source_ids if source_id in won]


def take_over(
    conn: Connection, st: statements.Prebuilt, source_id: Any, lease: Any, *, token: str | None = None
) -> Claim | None:
    """Take ``source_id`` over if its claim's lease expired; no commit."""
    token = token or str(uuid.uuid4())
    params = {"dbw_sid": source_id, "dbw_token": token, "dbw_lease": lease}
    if conn.execute(st.over, params).rowcount == 1:
        return Claim(source_id, token, taken_over=True)
    return None


def claim_first_many(
    conn: Connection, st: statements.Prebuilt, source_ids: Sequence[Any], lease: Any, *,
    tokens: Sequence[str] | None = None,
) -> list[Claim]:  # fmt: skip
    """First claims of many items in one statement (PostgreSQL): the ones whose insert won;
    ``tokens``: the claims' tokens (a limited round's, named by its slots), else new ones.

    Items that already have a work record are left to ``claim``. No commit.
    """
    named = dict(zip(source_ids, tokens, strict=True)) if tokens is not None else None
    by_id = named or {source_id: str(uuid.uuid4()) for source_id in source_ids}
    params = {"dbw_sids": list(by_id), "dbw_tokens": list(by_id.values()), "dbw_lease": lease}
    won = conn.execute(st.first_many, params).scalars().all()
    return [Claim(source_id, by_id[source_id]) for source_id in won]


def claim_in_one_statement(conn: Connection, one_shot: statements.Precompiled, params: dict[str, Any]) -> list[Any]:
    """``claim`` and ``take_over`` of every candidate in one autocommitted statement
    (PostgreSQL 13+): its rows (key, token or None, previous state; traced: then the attempt
    count and the writer's traceparent), in key order."""
    rows: Sequence[Any] = one_shot.execute(conn.execution_options(isolation_level="AUTOCOMMIT"), params).all()
    # Nothing to send in autocommit, but SQLAlchemy began a transaction of its own: ended,
    # so a next round on this connection is one statement too (and not a slower path
    # whose row locks would not outlive each statement).
    conn.commit()
    return list(rows)


# --- renew ---------------------------------------------------------------------------------


def renew(conn: Connection, table: sa.Table, claims: Sequence[Claim], *, lease_seconds: float) -> list[Claim]:
    """Extend the leases of ``claims`` still held; commit; return the claims another process holds now.

    One UPDATE per ``tuning.KEYS_PER_STATEMENT`` claims (``fenced.renew_many``), in one
    transaction; only when it matched fewer rows than claims are their records read to tell
    which claims are lost.
    A claim whose item just ended (its handler committed while we renewed, before the
    coordinator heard of it) is not lost: its record has no token any more.
    """
    caps = dialects.of(conn)
    st = statements.of(conn, table)
    lease = caps.seconds_value(lease_seconds)
    lost: list[Claim] = []
    ordered = sorted({c.token: c for c in claims}.values(), key=lambda c: c.source_id)  # one lock order
    with transactions.committed(conn):
        if st.relax is not None:
            conn.execute(st.relax)
        for at in range(0, len(ordered), KEYS_PER_STATEMENT):
            chunk = ordered[at : at + KEYS_PER_STATEMENT]
            params = {"dbw_sids": [c.source_id for c in chunk], "dbw_tokens": [c.token for c in chunk], "dbw_lease": lease}
            if conn.execute(st.renew_many, params).rowcount != len(chunk):
                lost += _held_by_another(conn, st.holders, chunk)
    return lost


def _held_by_another(conn: Connection, holders: sa.Select[Any], claims: Sequence[Claim]) -> list[Claim]:
    """Those of ``claims`` whose record is gone or held under another token."""
    held: dict[Any, Any] = dict(conn.execute(holders, {"dbw_sids": [c.source_id for c in claims]}).tuples().all())
    return [c for c in claims if c.source_id not in held or (held[c.source_id] not in (None, c.token))]


# --- finish, unfinish, give_back -------------------------------------------------------------


def finish(conn: Connection, table: sa.Table, claim: Claim, status: ExecutionStatus = ExecutionStatus.FINISHED,
           *, error: str | None = None) -> bool:  # fmt: skip
    """Record ``status`` for ``claim`` if it is still current (the fence); no commit.

    The caller commits: in a handler process this write shares the handler's transaction,
    so the handler's writes and the outcome commit together or not at all. UNFINISHED keeps
    the attempts (``give_back``); a handler's ``Unfinished()`` is ``unfinish``.
    """
    params = {"dbw_sid": claim.source_id, "dbw_token": claim.token, "dbw_status": status.value,
              "dbw_error": clip(error)}  # fmt: skip
    return bool(conn.execute(statements.of(conn, table).complete, params).rowcount == 1)


class Completer:
    """``finish`` and ``unfinish`` (no wait) for one work table, with the attempt's history
    row, through ``Precompiled`` (a handler process's hot path). Where the server allows
    (``recorded_writes``) the fenced write and the history row are one statement."""

    def __init__(self, table: sa.Table) -> None:
        self._table = table
        self._history = history.history_table(table)
        # (finish, step over) alone, and with the history row where the server allows.
        self._plain: tuple[statements.Precompiled, statements.Precompiled] | None = None
        self._recorded: tuple[statements.Precompiled, statements.Precompiled] | None = None
        self._dialect: Any = None

    def __call__(self, conn: Connection, claim: Claim, status: ExecutionStatus, attempt: history.Attempt) -> bool:
        """Record ``status`` (FINISHED or UNFINISHED) and the attempt if ``claim`` is still
        current; no commit. Whether it was."""
        if self._plain is None or conn.dialect is not self._dialect:
            self.prepare(conn)
        assert self._plain is not None
        values: dict[str, Any] = {"dbw_sid": claim.source_id, "dbw_token": claim.token}
        outcome = status.value  # the history's outcome names match: finished, unfinished
        recorded = self._recorded is not None and attempt.table is not None
        if recorded:
            values |= attempt.values(outcome)
        finish, step_over = self._recorded if recorded and self._recorded is not None else self._plain
        if status is ExecutionStatus.UNFINISHED:
            result = step_over.execute(conn, values)
        else:
            values |= {"dbw_status": status.value, "dbw_error": None}
            result = finish.execute(conn, values)
        current = dialects.inserted(result)  # a row returned (recorded), else the row count
        if current and not recorded:
            attempt.record(conn, claim.source_id, outcome)
        return bool(current)

    def prepare(self, conn: Connection) -> None:
        """Compile for ``conn``'s dialect now (else on first use)."""
        st = statements.of(conn, self._table)
        self._dialect = conn.dialect
        self._plain = (statements.Precompiled(st.complete), statements.Precompiled(st.step_over))
        self._recorded = (
            (statements.Precompiled(history.recorded(st.complete, self._history)),
             statements.Precompiled(history.recorded(st.step_over, self._history)))
            if dialects.of(conn).recorded_writes else None
        )  # fmt: skip
        for run in self._plain + (self._recorded or ()):
            run.prepare(conn.dialect)


def unfinish(conn: Connection, table: sa.Table, claim: Claim, *, after: float | None = None) -> bool:
    """The handler returned ``Unfinished(after=...)``: UNFINISHED if ``claim`` is still
    current, the next step's attempts start at 0, and it waits ``after`` seconds on the
    server's clock (None: claimable at once). No commit."""
    update = statements.step_over(table)
    if after:
        update = update.values(not_before=dialects.of(conn).now_plus(after))
    params = {"dbw_sid": claim.source_id, "dbw_token": claim.token}
    return bool(conn.execute(update, params).rowcount == 1)


def give_back(conn: Connection, table: sa.Table, claim: Claim, *, started: bool = True) -> bool:
    """Give ``claim`` back at once (UNFINISHED, no lease) so any process may take it; commits.

    ``started=False``: its handler never ran (prefetched, taken back, or a transient
    database error), so the attempt its claim counted is taken back too.
    """
    with transactions.committed(conn):
        relax = statements.of(conn, table).relax
        if relax is not None:
            conn.execute(relax)
        released = finish(conn, table, claim, ExecutionStatus.UNFINISHED)
        if released and not started:
            w = table.c
            conn.execute(
                dialects.update_by_key(table)
                .where(w.source_id == claim.source_id, w.claim_token.is_(None), w.attempts > 0)
                .values(attempts=w.attempts - 1)
            )
    return released


# --- fail, wait_for_retry --------------------------------------------------------------------


def fail(conn: Connection, table: sa.Table, claim: Claim, *, error: str, traceback: str | None = None) -> bool:
    """FAILED for good if ``claim`` is still current; no commit."""
    now = dialects.of(conn).now()
    values = {"execution_status": FAILED, "not_before": None, "ended_at": now, "changed_at": now}
    return _end_attempt(conn, table, claim, values, error=error, traceback=traceback)


def wait_for_retry(conn: Connection, table: sa.Table, claim: Claim, seconds: float, *, error: str,
                   traceback: str | None = None) -> bool:  # fmt: skip
    """UNFINISHED, not claimable for ``seconds`` (server clock), if ``claim`` is still current;
    the attempts go on counting. No commit."""
    values = {"execution_status": UNFINISHED, "not_before": dialects.of(conn).now_plus(seconds)}
    return _end_attempt(conn, table, claim, values, error=error, traceback=traceback)


def _end_attempt(conn: Connection, table: sa.Table, claim: Claim, values: dict[str, Any], *, error: str,
                 traceback: str | None) -> bool:  # fmt: skip
    values |= {"claim_token": None, "lease_expires_at": None, "error": clip(error), "traceback": clip(traceback)}
    update = dialects.update_by_key(table).where(fence(table, claim.source_id, claim.token)).values(**values)
    return bool(conn.execute(update).rowcount == 1)


# --- cancel, reset -----------------------------------------------------------------------------


def cancel(conn: Connection, table: sa.Table, source_id: Any) -> bool:
    """Mark ``source_id`` FAILED with the error ``cancelled`` unless it is FINISHED or FAILED,
    a never-claimed item included (it gets a record, so it will not run; an id with no source
    row is not one); no commit.

    A running handler loses its claim: the record keeps the token ``cancelled`` (never a
    claim's), so its pod's next lease renewal finds the claim held by another and ends the
    handler, and the fence discards whatever it would commit. True if something was cancelled.

    Locks, in the order a claim takes them (the source row, then the work record), so that a
    cancel in the application's transaction cannot deadlock a claim: a never-claimed item's
    source row is share-locked (PostgreSQL: FOR KEY SHARE, what the record's foreign key takes
    anyway) before its record is written, and the record is updated only once it is known to
    exist. (An UPDATE that finds no record takes a gap lock at MySQL/MariaDB's default
    REPEATABLE READ; a claim inserting into that gap waits on it while holding the source row
    the cancel's insert then waits on: a deadlock.)
    """
    w = table.c
    update = dialects.update_by_key(table).where(w.source_id == source_id, w.execution_status.not_in(DONE))
    if conn.execute(sa.select(sa.literal(1)).where(w.source_id == source_id)).first() is None:
        key = next(iter(w.source_id.foreign_keys)).column
        source_row = sa.select(sa.literal(1)).where(key == source_id).with_for_update(read=True, key_share=True)
        if conn.execute(source_row).first() is None:
            return False  # no such source row: nothing to cancel
        insert = dialects.of(conn).insert_ignoring_duplicate(table, "source_id").values(
            source_id=source_id, attempts=0, **_cancelled(conn)
        )
        if dialects.inserted(conn.execute(insert)):
            return True
        # A first claim won the race for the record: cancel that claim instead.
    return bool(conn.execute(update.values(**_cancelled(conn))).rowcount == 1)


def reset(session: Session, table: sa.Table, which: sa.ColumnElement[bool], *, source_table: str,
          statuses: Sequence[str] = (FAILED,)) -> int:  # fmt: skip
    """Set the items ``which`` selects that are in ``statuses`` (FAILED; FINISHED too to run
    them again) back to UNFINISHED, error and claim cleared; how many.

    The reset keys are announced on ``source_table`` (``notify.announce_rows``: NOTIFY, or
    the change table) with the caller's commit, so pods whose claim sweep passed these items
    claim them at once instead of at the fleet's next wrap.
    """
    w = table.c
    reset = (
        sa.update(table)
        .where(which, w.execution_status.in_(statuses))
        .values(
            execution_status=UNFINISHED,
            error=None,
            claim_token=None,
            lease_expires_at=None,
            traceback=None,
            not_before=None,
            attempts=0,  # a new step: its attempts start again
        )
    )
    conn = session.connection(bind_arguments={"clause": reset})
    if conn.dialect.name == "postgresql":
        keys = list(conn.execute(reset.returning(w.source_id)).scalars())
        count = len(keys)
    else:  # no UPDATE ... RETURNING: the keys first, under the same conditions
        keys = list(conn.execute(sa.select(w.source_id).where(which, w.execution_status.in_(statuses))).scalars())
        count = int(getattr(conn.execute(reset), "rowcount", 0)) if keys else 0
    notify.announce_rows(conn, source_table, keys)
    return count


def cancel_records(conn: Connection, table: sa.Table, source_ids: Sequence[Any]) -> int:
    """``cancel`` the existing records of ``source_ids`` that are not FINISHED or FAILED, in
    one statement; no commit. How many."""
    w = table.c
    update = dialects.update_by_key(table).where(w.source_id.in_(list(source_ids)), w.execution_status.not_in(DONE))
    return int(conn.execute(update.values(**_cancelled(conn))).rowcount)


def _cancelled(conn: Connection) -> dict[str, Any]:
    """What a cancel writes: FAILED, error ``cancelled``, the claim taken away (see ``cancel``)."""
    return {"execution_status": FAILED, "claim_token": CANCELLED, "lease_expires_at": None,
            "error": CANCELLED, "traceback": None, "not_before": None, "ended_at": dialects.of(conn).now(),
            "changed_at": dialects.of(conn).now()}  # fmt: skip


def forget(conn: Connection, table: sa.Table, source_ids: Sequence[Any]) -> int:
    """Delete the records of ``source_ids`` that ended (finished or failed), as pruning a
    schedule's old ticks does; no commit. How many."""
    w = table.c
    return int(conn.execute(sa.delete(table).where(w.source_id.in_(source_ids), w.execution_status.in_(DONE))).rowcount)
