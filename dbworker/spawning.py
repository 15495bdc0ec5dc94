"""How handler processes start: forked from a fork server that has already imported dbworker.

In a fresh interpreter (multiprocessing's ``spawn``), a handler process imports SQLAlchemy,
its driver and dbworker first: about 0.5-0.9 s of CPU on a small machine, paid again for each
process that replaces a crashed one. multiprocessing's fork server imports them once
(``forkserver_main``), then forks each process from itself, which is ready in milliseconds and
shares those pages. The server is a single-threaded process of its own, so forking it is safe
while the coordinator runs threads.

Each process then starts as ``spawn`` starts it: multiprocessing hands it the coordinator's
``sys.path``, working directory and main module as they are now, and ``_boot`` the environment
as it is now (the server's own is the one of its start), before the application's handler
module is imported. Where there is no fork server (Windows), or it cannot start, processes
are spawned.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
import types
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

import sqlalchemy as sa

# Never fork the coordinator itself: it runs threads.
SPAWN = multiprocessing.get_context("spawn")
FORKSERVER: ForkServerContext | None = (
    multiprocessing.get_context("forkserver") if "forkserver" in multiprocessing.get_all_start_methods() else None
)
PRELOAD = ["dbworker.forkserver_main"]

log = logging.getLogger("dbworker")
_lock = threading.Lock()
_preloaded = False
_use_forkserver = FORKSERVER is not None


def method() -> str:
    """How the next handler process starts: "forkserver", or "spawn" where there is none."""
    return "forkserver" if _use_forkserver else "spawn"


def start(
    target: Callable[[Any, Connection], None], config: Any, conn: Connection, name: str, *, database_url: str | sa.URL
) -> BaseProcess:
    """Start ``target(config, conn)`` in a new handler process (not a daemon: handlers may
    start processes of their own); ``database_url``'s driver is one the server imports.

    The fork server listens on a socket in the temporary directory: where it cannot start
    (a read-only file system with no writable /tmp), processes are spawned, as said once
    in the log.
    """
    global _use_forkserver
    payload = pickle.dumps((target, config))  # unpickled by _boot, after the environment is set
    args = (dict(os.environ), payload, conn)
    if _use_forkserver and FORKSERVER is not None:
        _preload(FORKSERVER, database_url)
        process: BaseProcess = FORKSERVER.Process(target=_boot, args=args, name=name, daemon=False)
        try:
            process.start()
            return process
        except OSError as exc:
            log.warning("dbworker: handler processes are spawned (the fork server could not start: %s)", exc)
            _use_forkserver = False
    process = SPAWN.Process(target=_boot, args=args, name=name, daemon=False)
    process.start()
    return process


def _preload(context: ForkServerContext, database_url: str | sa.URL) -> None:
    # Set before the server's first start (it starts with the first process), with the driver
    # of the first worker's database; an application that uses the fork server itself shares
    # it and gets dbworker's imports in it.
    global _preloaded
    with _lock:
        if not _preloaded:
            context.set_forkserver_preload(PRELOAD + driver_modules(database_url))
            _preloaded = True


def driver_modules(database_url: str | sa.URL) -> list[str]:
    """The modules of ``database_url``'s SQLAlchemy dialect and driver (psycopg alone is
    about 70 ms of imports); none when the URL names no dialect installed here."""
    try:
        dialect = sa.engine.make_url(database_url).get_dialect()
        dbapi = dialect.import_dbapi()
    except Exception:  # the handler processes' own engines report it
        return []
    return [dialect.__module__] + ([dbapi.__name__] if isinstance(dbapi, types.ModuleType) else [])


def _boot(environ: dict[str, str], payload: bytes, conn: Connection) -> None:
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    target, config = pickle.loads(payload)
    target(config, conn)
