"""The one commit-or-roll-back helper: committed when the block ends, rolled back when anything escapes."""

from __future__ import annotations

from typing import Any

import pytest

from dbworker.sql import transactions


class _Conn:
    def __init__(self, *, commit_fails: bool = False) -> None:
        self.calls: list[str] = []
        self._commit_fails = commit_fails

    def commit(self) -> None:
        self.calls.append("commit")
        if self._commit_fails:
            raise RuntimeError("connection lost at commit")

    def rollback(self) -> None:
        self.calls.append("rollback")


def _conn(**kwargs: Any) -> Any:
    return _Conn(**kwargs)


def test_a_block_that_ends_is_committed() -> None:
    conn = _conn()
    with transactions.committed(conn):
        conn.calls.append("work")
    assert conn.calls == ["work", "commit"]


@pytest.mark.parametrize("raised", [ValueError("bug"), KeyboardInterrupt()])
def test_anything_raised_rolls_back_and_escapes(raised: BaseException) -> None:
    conn = _conn()
    with pytest.raises(type(raised)), transactions.committed(conn):
        raise raised
    assert conn.calls == ["rollback"]


def test_a_failed_commit_rolls_back() -> None:
    conn = _conn(commit_fails=True)
    with pytest.raises(RuntimeError, match="at commit"), transactions.committed(conn):
        pass
    assert conn.calls == ["commit", "rollback"]


def test_the_end_watch_sees_a_statement_that_ends_the_watched_transaction_only(tmp_path: Any) -> None:
    import sqlalchemy as sa

    from dbworker.sql.transactions import EndWatch

    engine = sa.create_engine(f"sqlite:///{tmp_path}/watch.db")  # two connections of their own
    watch = EndWatch()
    watch.attach(engine)
    try:
        with engine.connect() as conn, engine.connect() as other:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            conn.commit()
            watch.start(conn)
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            conn.exec_driver_sql("SELECT x FROM t").all()
            assert watch.ended is None  # writes and reads keep the transaction
            other.exec_driver_sql("SELECT 1").all()
            other.commit()
            assert watch.ended is None  # another connection's commit is not the handler's
            conn.exec_driver_sql("COMMIT")
            assert watch.stop() == "COMMIT"
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")
            conn.exec_driver_sql("COMMIT")
            assert watch.ended == "COMMIT" and not watch.watching  # stopped: nothing more seen
            watch.start(conn)
            assert watch.stop() is None
    finally:
        watch.detach(engine)
