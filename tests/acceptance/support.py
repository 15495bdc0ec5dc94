"""Aids of the acceptance tests: a `dbworker` subprocess, scraping it, a cuttable TCP proxy.

Every process started here is its own session leader, so teardown can end its whole process
group; nothing outlives a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import kill, pid_alive, wait_until

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.acceptance.app:coordinator"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dbworker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dbworker", *args]


def run_command(
    args: Sequence[str],
    *,
    database_url: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run a `dbworker` command to its end (migrate, inspect, retry, bad input)."""
    return subprocess.run(
        dbworker_command(*args),
        cwd=ROOT,
        env=_env(database_url, env),
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def _env(database_url: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBWORKER_")}
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


class Worker:
    """A running `dbworker run` process with its HTTP port."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.log_path = log_dir / f"dbworker-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in close()
        argv = [*prefix, *dbworker_command(
            "run", APP, "--metrics-host", "127.0.0.1", "--metrics-port", str(self.port), *args
        )]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=_env(database_url, env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.process.pid

    # --- HTTP ----------------------------------------------------------------------------
    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        status, text = self.get("/metrics")
        assert status == 200, text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples().get((name, frozenset(labels.items())))

    def wait_value(self, name: str, expected: float, *, timeout: float = 60, **labels: str) -> None:
        wait_until(
            lambda: self.value(name, **labels) == expected,
            timeout=timeout,
            what=f"{name}{labels} == {expected} (log: {self.log_tail()})",
        )

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(lambda: self._alive_or_fail() and self.get("/readyz")[0] == 200,
                   timeout=timeout, what=f"/readyz 200 (log: {self.log_tail()})")  # fmt: skip

    def _alive_or_fail(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"dbworker exited with {self.process.returncode}: {self.log_tail()}"
            )
        return True

    # --- process -------------------------------------------------------------------------
    def handler_pids(self) -> list[int]:
        """Live child processes (handler slots) of the worker."""
        out = subprocess.run(
            ["ps", "-o", "pid=,args=", "--ppid", str(self.pid)], capture_output=True, text=True
        )
        return [
            int(line.split()[0]) for line in out.stdout.splitlines() if "multiprocessing" in line
        ]

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def signal_group(self, sig: int) -> None:
        """What a terminal's Ctrl-C or `kill -TERM -PGID` does: every process in the group."""
        os.killpg(self.pid, sig)

    def wait_exit(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"dbworker did not exit within {timeout}s: {self.log_tail()}"
            ) from None

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def log_tail(self, lines: int = 15) -> str:
        return " | ".join(self.log_text().splitlines()[-lines:])

    def close(self) -> None:
        """End the worker and everything in its process group, whatever state it is in."""
        if self.process.poll() is None:
            for pid in self.handler_pids():
                kill(pid)
            kill(self.pid)
            self.process.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # leftovers, e.g. children of a crashed parent
        self._log.close()


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def all_gone(pids: Sequence[int]) -> bool:
    return not any(pid_alive(p) for p in pids)


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; ``cut()`` makes the target unreachable, ``restore()`` undoes it.

    Stands in for a database outage without touching the real server, which other tests use.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._blackhole = threading.Event()
        self.restore()

    def blackhole(self) -> None:
        """Keep every connection open but forward nothing: a server that hangs, not one that refuses."""
        self._blackhole.set()

    def restore(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self.port))
            s.listen(64)
            self._listener = s
        self._stop.clear()
        self._thread = threading.Thread(target=self._accept, args=(s,), daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Refuse new connections and reset the open ones, as a dead server would."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        self._stop.set()
        if listener is not None:
            listener.close()
        if self._thread is not None:
            self._thread.join(5)
        for c in conns:
            # shutdown() before close(): a pump thread blocked in recv() on this socket holds it
            # open past a bare close() (Linux keeps the socket while a call uses it), and a reply
            # that pump then drops leaves the worker waiting on a connection that never ends.
            with contextlib.suppress(OSError):
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                if not sel.select(0.1):
                    continue
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                if self._blackhole.is_set():
                    with self._lock:
                        self._conns.append(client)  # held open, never answered
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    client.close()
                    continue
                with self._lock:
                    if self._listener is not listener:
                        client.close()
                        upstream.close()
                        return
                    self._conns += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()
        finally:
            sel.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._blackhole.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
