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
