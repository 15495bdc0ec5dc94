"""Which wake-up services a coordinator runs, by database, and that they start and stop as a list.

No server: a SQLite file, and PostgreSQL/MySQL URLs nothing answers (looking for the
wake-up triggers fails, so those sources poll; the listener connects only once started).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from dbworker import Coordinator
from dbworker.schedules import inserter
from dbworker.wakeups import postgres, services, sqlite
from tests.apps import basic

UNREACHABLE = "127.0.0.1:9"  # the discard port: the connection is refused at once


def registered(url: str, *, periodic: bool = False) -> list[object]:
    c = Coordinator(sessionmaker(sa.create_engine(url)), database_url=url)
    c.transactional_worker(name="items", source=basic.Item)(basic.handle)
    if periodic:
        c.periodic(name="tick", every=60)(basic.handle)
    return list(c.registrations())


def build(url: str, **options: object) -> services.Wakeups:
    workers = registered(url, periodic=bool(options.pop("periodic", False)))
    engine = sa.create_engine(url)
    return services.build(engine, workers, workers, listen_url=options.pop("listen_url", None),  # type: ignore[arg-type]
                          transaction_pooler=bool(options.pop("transaction_pooler", False)), secrets=())  # fmt: skip


def kinds(w: services.Wakeups) -> list[type]:
    return [type(s) for s in w.services]


def test_sqlite_without_triggers_watches_commits_and_announces_nothing(tmp_path: Path) -> None:
    w = build(f"sqlite:///{tmp_path / 'work.db'}", periodic=True)
    assert kinds(w) == [sqlite.DataVersionWatcher, inserter.TickInserter]
    assert w.announce is None and w.fed == frozenset()


def test_postgresql_listens_and_announces_through_the_listener() -> None:
    w = build(f"postgresql+psycopg://u@{UNREACHABLE}/db")
    assert kinds(w) == [postgres.Listener]
    assert w.announce is not None and w.announce.__self__ is w.services[0]  # type: ignore[attr-defined]


def test_behind_a_transaction_pooler_postgresql_listens_only_on_listen_url(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dbworker")
    url = f"postgresql+psycopg://u@{UNREACHABLE}/db"
    assert kinds(build(url, transaction_pooler=True)) == []
    assert "poll" in caplog.text
    listening = build(url, transaction_pooler=True, listen_url=sa.make_url(url))
    assert kinds(listening) == [postgres.Listener]


def test_mysql_without_triggers_polls() -> None:
    w = build(f"mysql+pymysql://u@{UNREACHABLE}/db")
    assert kinds(w) == [] and w.announce is None


class Recorder:
    def __init__(self, calls: list[str], name: str) -> None:
        self.calls, self.name = calls, name

    def start(self) -> None:
        self.calls.append(f"start {self.name}")

    def drain(self) -> None:
        self.calls.append(f"drain {self.name}")

    def stop(self, deadline: float) -> None:
        self.calls.append(f"stop {self.name} {deadline}")


def test_services_start_drain_and_stop_as_a_list(tmp_path: Path) -> None:
    calls: list[str] = []
    w = build(f"sqlite:///{tmp_path / 'work.db'}")
    listed = services.Wakeups(router=w.router, services=(Recorder(calls, "a"), Recorder(calls, "b")), fed=frozenset(),
                              announce=None)  # fmt: skip
    listed.start()
    listed.drain()
    listed.stop(7.0)
    assert calls == ["start a", "start b", "drain a", "drain b", "stop a 7.0", "stop b 7.0"]
