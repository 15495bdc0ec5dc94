"""Coordinator processes of the model test (``tests.apps.model_app``): started, SIGKILLed and
SIGTERMed by the driver, with the times and handler pids the checks need."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import descendants_of, kill, pid_alive, wait_until

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ending:
    """One coordinator process ended by the driver."""

    at: float  # when the signal was sent
    dead_at: float  # when the process and all its handler processes were gone
    pids: frozenset[int]  # its handler processes
    graceful: bool  # SIGTERM (drain) rather than SIGKILL


class Fleet:
    """The running coordinator processes, one per slot; ended ones are recorded in ``endings``."""

    def __init__(self, url: str, directory: Path, *, lease: float, max_poll: float) -> None:
        self.url = url
        self.directory = directory
        self.lease = lease
        self.max_poll = max_poll
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.endings: list[Ending] = []
        self.starts: list[float] = []  # when each coordinator process said it was running
        self._logs = 0

    def start(self, slot: int) -> None:
        self._logs += 1
        stderr = open(self.directory / f"coordinator-{slot}-{self._logs}.log", "w")  # noqa: SIM115 - the child's
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.apps.model_app", self.url, "--lease", str(self.lease),
             "--max-poll", str(self.max_poll)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                 "DBWORKER_MODEL_DIR": str(self.directory)},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )  # fmt: skip
        stderr.close()
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "started", f"model coordinator said {line!r}; see {stderr.name}"
        self.procs[slot] = proc
        self.starts.append(time.time())

    def end(self, slot: int, *, graceful: bool) -> Ending:
        """SIGKILL (or SIGTERM) the coordinator in ``slot`` and wait for its handler processes to go."""
        proc = self.procs.pop(slot)
        pids = frozenset(descendants_of(proc.pid))
        at = time.time()
        kill(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        proc.wait(timeout=90)
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=60, what="handler processes to exit")
        ending = Ending(at=at, dead_at=time.time(), pids=pids, graceful=graceful)
        self.endings.append(ending)
        return ending

    def abandon(self) -> None:
        """Teardown: SIGKILL what is left and wait for its handler processes to exit."""
        pids = set()
        for proc in self.procs.values():
            pids.update(descendants_of(proc.pid))
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        self.procs.clear()
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=60, what="handler processes to exit")
