"""Worker processes ("pods") of the benchmark: start, measure, stop.

A pod is one worker command in its own session, as a container would run it. This module
starts pods, sums CPU over each pod's process tree, finds the database and Redis
connections a pod holds, and stops pods (TERM, then KILL of the pod's process group).
It knows nothing of the systems under test; adapters supply the command line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil


@dataclass
class Pod:
    """One started worker command and where its output goes."""

    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: IO[bytes]
    # Every pid ever seen in the tree, so a stop can reach children the root lost track of.
    seen_pids: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid

    def tree(self) -> list[psutil.Process]:
        """The pod's live processes: root first, then descendants."""
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        self.seen_pids.update(p.pid for p in procs)
        return procs

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_pod(
    argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path
) -> Pod:
    """Start ``argv`` in a new session (its own process group) with output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = log_path.open("wb")
    full_env = {**os.environ, **env}
    process = subprocess.Popen(
        list(argv),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=full_env,
        cwd=str(cwd),
        start_new_session=True,
    )
    return Pod(argv=list(argv), log_path=log_path, process=process, log_file=log_file)


def stop_pod(pod: Pod, *, grace: float = 15.0) -> None:
    """Stop a pod: SIGTERM to its root, wait ``grace`` seconds, then SIGKILL its group and tree.

    Only processes this pod started are signalled: its own process group and pids seen in its
    tree (a child may have left the group).
    """
    pod.tree()
    if pod.alive():
        with contextlib.suppress(ProcessLookupError):
            pod.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.process.wait(timeout=grace)
    leftovers = _live_pids(pod.seen_pids - {pod.pid})
    if pod.alive() or leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pod.pid, signal.SIGKILL)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.process.wait(timeout=5)
    pod.log_file.close()


def _live_pids(pids: set[int]) -> list[int]:
    live = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                live.append(pid)
        except psutil.NoSuchProcess:
            continue
    return live


def tree_cpu_seconds(pod: Pod) -> float:
    """User+system CPU of the pod's live processes and of the children they have reaped."""
    total = 0.0
    for proc in pod.tree():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_ports(pod: Pod, remote_port: int) -> set[int]:
    """Local TCP ports of the pod's connections to ``remote_port`` on this host."""
    ports: set[int] = set()
    for proc in pod.tree():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            for conn in proc.net_connections(kind="tcp"):
                if conn.raddr and conn.raddr.port == remote_port and conn.laddr:
                    ports.add(conn.laddr.port)
    return ports


def wait_alive(pods: Sequence[Pod], seconds: float) -> None:
    """Fail early with the pod's log when a pod exits during start-up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pod in pods:
            if not pod.alive():
                raise RuntimeError(
                    f"worker exited with code {pod.process.returncode}: {' '.join(pod.argv)}\n"
                    f"{pod.log_tail()}"
                )
        time.sleep(0.05)
