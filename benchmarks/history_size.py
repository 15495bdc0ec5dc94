"""Bytes per attempt of the attempt history on disk, per database (issue 30).

``python -m benchmarks.history_size [--attempts N] [--pg-dsn ...] [--mariadb-url ...]``
records N attempts through ``dbworker.sql.history.record`` (the call the handler process
makes) for three kinds of attempt, and prints the history table's size on disk (table and
indexes) divided by N: PostgreSQL's ``pg_total_relation_size``, MariaDB's
``information_schema`` data and index lengths (after ``ANALYZE TABLE``; InnoDB counts
whole 16 KiB pages), SQLite's ``dbstat`` (page bytes of the table and its indexes).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import attemptlogs
from dbworker.sql import history, tables

POD = "emails-7f9c6d8b5-x2k4q:7"  # a 34-character claimed_by, as on Kubernetes
ERROR = "SMTP server busy: 451 4.3.0 try again later"
TRACEBACK = "Traceback (most recent call last):\n" + "".join(
    f'  File "/app/mail/send.py", line {10 * n}, in step_{n}\n    client.send(message)\n' for n in range(10)
) + f"smtplib.SMTPServerDisconnected: {ERROR}\n"


class Base(DeclarativeBase):
    pass


class Mail(Base):
    __tablename__ = "size_mail"
    id: Mapped[int] = mapped_column(primary_key=True)


def _logs(count: int) -> str | None:
    records = [attemptlogs.entry(logging.LogRecord("mail.send", logging.INFO, __file__, 1,
                                                  "sent batch %d of 40 to %d recipients", (n, 250), None))
               for n in range(count)]  # fmt: skip
    return attemptlogs.encode(records)


KINDS = {
    "finished, no error, no logs": {"outcome": "finished"},
    "finished, 5 log records": {"outcome": "finished", "logs": _logs(5)},
    "failed, error + 10-frame traceback + 5 log records": {"outcome": "failed", "error": ERROR,
                                                           "traceback": TRACEBACK, "logs": _logs(5)},
}  # fmt: skip


def measure(url: str, attempts: int) -> dict[str, float]:
    engine = sa.create_engine(url)
    work = tables.work_table("size", Mail)
    table = history.history_table(work)
    found = {}
    for kind, values in KINDS.items():
        Base.metadata.drop_all(engine, tables=[table, work, Mail.__table__])  # type: ignore[list-item]
        Base.metadata.create_all(engine, tables=[Mail.__table__, work, table])  # type: ignore[list-item]
        with engine.begin() as conn:
            conn.execute(sa.insert(Mail), [{"id": i} for i in range(1, attempts // 20 + 1)])
            for n in range(attempts):  # 20 attempts per item, as the default bound keeps
                history.record(conn, table, n // 20 + 1, started_at=history.utcnow(), claimed_by=POD, **values)
        found[kind] = _size(engine, table.name) / attempts
    Base.metadata.drop_all(engine, tables=[table, work, Mail.__table__])  # type: ignore[list-item]
    engine.dispose()
    return found


def _size(engine: sa.Engine, name: str) -> int:
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            return int(conn.execute(sa.text("SELECT pg_total_relation_size(:t)"), {"t": name}).scalar_one())
        if engine.dialect.name in ("mysql", "mariadb"):
            conn.exec_driver_sql(f"ANALYZE TABLE {name}").all()
            return int(conn.execute(sa.text(
                "SELECT data_length + index_length FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = :t"), {"t": name}).scalar_one())  # fmt: skip
        return int(conn.execute(sa.text(
            "SELECT sum(pgsize) FROM dbstat WHERE name = :t OR name IN "
            "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t)"), {"t": name}).scalar_one())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history_size", description=__doc__)
    parser.add_argument("--attempts", type=int, default=20_000)
    parser.add_argument("--pg-dsn", default="postgresql+psycopg://postgres@127.0.0.1:5432/bench")
    parser.add_argument("--mariadb-url", default="mysql+pymysql://root@127.0.0.1:3306/bench")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"PostgreSQL": args.pg_dsn, "MariaDB": args.mariadb_url, "SQLite": f"sqlite:///{Path(tmp) / 'size.db'}"}
        results = {name: measure(url, args.attempts) for name, url in urls.items()}
    print(f"| attempt ({args.attempts:,} recorded, 20 per item) | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for kind in KINDS:
        print(f"| {kind} | " + " | ".join(f"{results[db][kind]:.0f}" for db in results) + " |")


if __name__ == "__main__":
    main()
