"""podman for the image checks: build a shipped Dockerfile, run a container as a pod would.

``build`` builds from the repository root with the Dockerfile's own ``.dockerignore`` and the
tests' base as ``PYTHON_IMAGE``. The build steps reach PyPI as pip does on this machine: its
configuration (files and ``PIP_*`` variables, as ``pip config list`` shows them) becomes one
pip.conf, mounted with every file it names (the CA bundle of the TLS re-signing proxy, local
wheel folders) into the RUN steps only; nothing of it lands in the image.

``Container`` runs an image the way the operator's and the chart's pod specs ask: read-only
root with a writable /tmp only, no capabilities, no new privileges, podman's default seccomp
profile, the image's own USER, host network (so 127.0.0.1 is this machine's PostgreSQL), and
/dev/termination-log a host file the test reads afterwards.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
BASE_ENV = "DBWORKER_TEST_IMAGE_BASE"
PREFIX = "dbworker-test-"  # every container and image tag the checks make starts with this


def podman(*args: str, check: bool = True, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """One podman command; its output as text. ``check`` raises with stderr on a non-zero exit."""
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


def base_image() -> str:
    """The Debian base `make test-images` made (tests/images/base.sh); these checks need it."""
    base = os.environ.get(BASE_ENV)
    if not base:
        raise RuntimeError(f"{BASE_ENV} is not set: run the image checks with `make test-images`")
    return base


def _pip_settings() -> dict[str, dict[str, str]]:
    """``pip config list`` of this machine as sections; ``PIP_*`` variables win, as in pip."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=True).stdout
    files: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^(:env:|[\w-]+)\.([\w-]+)='(.*)'$", line)
        if match:
            scope, key, value = match.groups()
            (env if scope == ":env:" else files.setdefault(scope, {}))[key] = value
    files.setdefault("global", {}).update(env)
    return files


def _local_paths(value: str) -> list[str]:
    """Files and folders on this machine that a pip setting names: paths, and for a file://
    index (``<folder>/simple``) its whole folder, since its pages link to files beside it."""
    paths = []
    for word in value.split():
        path = word.removeprefix("file://")
        if word.startswith("file://"):
            path = os.path.dirname(path.rstrip("/"))
        if path.startswith("/") and os.path.exists(path):
            paths.append(path)
    return paths


def pip_build_options(workdir: Path) -> list[str]:
    """``podman build`` options giving the RUN steps this machine's pip configuration."""
    settings = _pip_settings()
    conf = workdir / "pip.conf"
    conf.write_text("".join(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
                            for section, values in settings.items()))
    mounts = {str(conf): "/etc/pip.conf"}
    for values in settings.values():
        for value in values.values():
            mounts.update({path: path for path in _local_paths(value)})
    return [f"--volume={host}:{inside}:ro" for host, inside in sorted(mounts.items())]


def build(dockerfile: str, tag: str, workdir: Path) -> None:
    """Build ``dockerfile`` (relative to the root) from the root, with its own .dockerignore."""
    podman("build", "--quiet", "--network=host", f"--file={dockerfile}",
           f"--ignorefile={dockerfile}.dockerignore", f"--build-arg=PYTHON_IMAGE={base_image()}",
           *pip_build_options(workdir), f"--tag={tag}", str(ROOT), timeout=900)


def alive(container: str) -> bool:
    """Running, or stopping (podman's state while `podman stop` waits: .State.Running is false
    then, though the process still drains)."""
    result = podman("inspect", "--format={{.State.Status}}", container, check=False)
    return result.stdout.strip() in ("running", "stopping")


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", "--format={{.Size}}", tag).stdout.strip())


def image_user(tag: str) -> str:
    return podman("image", "inspect", "--format={{.Config.User}}", tag).stdout.strip()


def run_once(image: str, *args: str, timeout: float = 120, **run_options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``image`` hardened to completion and return the finished podman run."""
    container = Container(image, *args, **run_options)
    try:
        code = container.wait(timeout)
        return subprocess.CompletedProcess(args, code, container.logs(), "")
    finally:
        container.remove()


def hardened(*, env: dict[str, str] | None = None, volumes: dict[str, str] | None = None,
             termination_log: Path | None = None) -> list[str]:
    """``podman run`` options for a container as the pod specs run it (module docstring)."""
    options = ["--read-only", "--read-only-tmpfs=false", "--tmpfs=/tmp:rw,size=64m,mode=1777",
               "--cap-drop=ALL", "--security-opt=no-new-privileges", "--network=host"]
    if termination_log is not None:
        termination_log.write_text("")
        termination_log.chmod(0o666)  # the image's user writes it, as the kubelet's file allows
        options.append(f"--volume={termination_log}:/dev/termination-log:rw")
    for host, inside in (volumes or {}).items():
        options.append(f"--volume={host}:{inside}:ro")
    for key, value in (env or {}).items():
        options.append(f"--env={key}={value}")
    return options


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text as (name, labels) -> value."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Container:
    """One detached container, hardened as the pod specs ask; ``remove()`` deletes it."""

    def __init__(self, image: str, *args: str, env: dict[str, str] | None = None,
                 volumes: dict[str, str] | None = None, termination_log: Path | None = None) -> None:
        self.name = PREFIX + secrets.token_hex(4)
        self.termination_log = termination_log
        self.port = int((env or {}).get("DBWORKER_METRICS_PORT", "0"))
        options = hardened(env=env, volumes=volumes, termination_log=termination_log)
        podman("run", "--detach", f"--name={self.name}", *options, image, *args)

    def get(self, path: str) -> tuple[int, str]:
        """GET on the container's metrics port (host network: 127.0.0.1)."""
        response = httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10)
        return response.status_code, response.text

    def value(self, name: str, **labels: str) -> float | None:
        return samples(self.get("/metrics")[1]).get((name, frozenset(labels.items())))

    def wait_for(self, predicate: Any, what: str, timeout: float = 90) -> Any:
        """Wait for ``predicate()``; fail at once, with the log, if the container exits first."""
        exited = object()
        try:
            value = wait_until(lambda: predicate() if self.running() else exited,
                               timeout=timeout, interval=0.2, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- container log tail ---\n{self.logs()[-3000:]}") from None
        if value is exited:
            raise AssertionError(f"the container exited while waiting for {what}:\n{self.logs()[-3000:]}")
        return value

    def inspect(self, template: str) -> str:
        return podman("inspect", f"--format={template}", self.name).stdout.strip()

    def running(self) -> bool:
        return alive(self.name)

    def proc_status(self) -> dict[str, str]:
        """/proc/<pid>/status of the container's main process, read from the host."""
        pid = self.inspect("{{.State.Pid}}")
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}

    def root_mount_options(self) -> set[str]:
        """The mount options of the container's / as its main process sees it."""
        pid = self.inspect("{{.State.Pid}}")
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            if fields[4] == "/":
                return set(fields[5].split(","))
        raise AssertionError("no root mount in the container's mountinfo")

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def wait(self, timeout: float = 120) -> int:
        """Wait for the container to exit; its exit code."""
        return int(podman("wait", self.name, timeout=timeout).stdout.strip())

    def stop(self, grace: float) -> subprocess.Popen[str]:
        """``podman stop``: SIGTERM, then SIGKILL after ``grace`` seconds; runs in the background."""
        return subprocess.Popen(["podman", "stop", f"--time={int(grace)}", self.name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def remove(self) -> None:
        podman("rm", "--force", "--time=0", self.name, check=False)
