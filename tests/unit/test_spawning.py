"""Handler processes start from the fork server, each with the environment as it is then."""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from typing import Any

import pytest

from dbworker import spawning


def _report(config: Any, conn: Connection) -> None:
    conn.send((config, os.environ.get("DBWORKER_SPAWN_PROBE"), "dbworker.child" in sys.modules, os.getppid()))
    conn.close()


def test_each_process_has_the_environment_as_it_is_when_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    parents = set()
    for value in ("one", "two"):  # the second comes from the same server, started with "one"
        monkeypatch.setenv("DBWORKER_SPAWN_PROBE", value)
        ours, theirs = multiprocessing.Pipe()
        process = spawning.start(_report, {"n": value}, theirs, "probe", database_url="sqlite://")
        theirs.close()
        assert ours.poll(60), "the process did not report"
        config, seen, preloaded, parent = ours.recv()
        process.join(60)
        assert (config, seen, process.exitcode) == ({"n": value}, value, 0)
        if spawning.method() == "forkserver":
            assert preloaded and parent != os.getpid()  # forked from the server, imports done
        parents.add(parent)
    assert len(parents) == 1


def test_the_server_imports_the_dialect_and_driver_of_the_database() -> None:
    assert spawning.driver_modules("postgresql+psycopg://u:secret@host/db") == [
        "sqlalchemy.dialects.postgresql.psycopg", "psycopg",
    ]  # fmt: skip
    assert spawning.driver_modules("mysql+pymysql://root@host/db")[-1] == "pymysql"
    assert spawning.driver_modules("nosuch+driver://x") == []


def test_where_the_fork_server_cannot_start_processes_are_spawned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Unstartable(multiprocessing.Process):
        def start(self) -> None:
            raise OSError(30, "Read-only file system")  # its socket's directory

    assert spawning.FORKSERVER is not None
    monkeypatch.setattr(spawning, "_use_forkserver", True)
    monkeypatch.setattr(spawning.FORKSERVER, "Process", Unstartable)
    ours, theirs = multiprocessing.Pipe()
    process = spawning.start(_report, "spawned", theirs, "probe", database_url="sqlite://")
    theirs.close()
    assert ours.poll(60), "the process did not report"
    assert ours.recv()[0] == "spawned"
    process.join(60)
    assert process.exitcode == 0 and spawning.method() == "spawn"
    assert "the fork server could not start: [Errno 30] Read-only file system" in caplog.text
