"""The application of `benchmarks.item_cost`: the fleet benchmark's one no-op worker, with
every statement counted in every process that imports it (the pod and its handler processes).

With DBWORKER_COST_COUNTS=<dir> set, each process counts what its SQLAlchemy engines send
(statements by their first words, BEGIN, COMMIT, ROLLBACK) and rewrites
`<dir>/<pid>.json` every 0.2 s. Counting costs CPU: `item_cost` measures CPU in runs without it.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from benchmarks.fleet_app import FleetItem
from dbworker import Coordinator, Finished, Outcome

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench_cost"
_counts: collections.Counter[str] = collections.Counter()


def _kind(statement: str) -> str:
    words = statement.split()
    head = " ".join(words[:2]).upper() if words else "?"
    for marker in (" FROM ", " INTO ", "UPDATE "):
        at = statement.upper().find(marker)
        if at >= 0:
            target = statement[at + len(marker):].split()[0] if statement[at + len(marker):].split() else ""
            return f"{head} .. {marker.strip()} {target.strip('(')}"
    return head


def _count_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    _counts[_kind(statement)] += 1


def _dump(directory: Path) -> None:
    while True:
        time.sleep(0.2)
        path = directory / f"{os.getpid()}.json"
        path.write_text(json.dumps(dict(_counts)))


if os.environ.get("DBWORKER_COST_COUNTS"):
    event.listen(Engine, "before_cursor_execute", _count_statement)
    event.listen(Engine, "begin", lambda conn: _counts.update(("BEGIN",)))
    event.listen(Engine, "commit", lambda conn: _counts.update(("COMMIT",)))
    event.listen(Engine, "rollback", lambda conn: _counts.update(("ROLLBACK",)))
    _dir = Path(os.environ["DBWORKER_COST_COUNTS"])
    _dir.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=_dump, args=(_dir,), daemon=True).start()



def noop(source: FleetItem, session: Session) -> Outcome:
    return Finished()


_url = os.environ.get("DATABASE_URL", DEFAULT_URL)
# DBWORKER_COST_HISTORY: "on" (the default), "nologs" (history rows without log records),
# "off" (history_attempts=0): what the attempt history costs, against the same library.
_history = os.environ.get("DBWORKER_COST_HISTORY", "on")
_options: dict[str, Any] = {"history_attempts": 0} if _history == "off" else {"history_logs": False} if _history == "nologs" else {}
coordinator = Coordinator(sessionmaker(create_engine(_url)), database_url=_url, **_options)
coordinator.transactional_worker(name="fleet", source=FleetItem)(noop)
