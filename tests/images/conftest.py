"""Fixtures of the image checks: both shipped images built once per run, removed at the end."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.images import podman
from tests.k8s.emulator import running
from tests.k8s.harness import NS, Operator, admission

DOCKERFILES = {"worker": "examples/imagededup/deploy/Dockerfile", "operator": "operator/Dockerfile"}


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """name -> tag of every Dockerfile the repository ships, built side by side on the tests' base."""
    workdir = tmp_path_factory.mktemp("build")
    tags = {name: f"localhost/{podman.PREFIX}{name}:{workdir.name}" for name in DOCKERFILES}
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None

    def build(name: str) -> str:
        start = time.monotonic()
        podman.build(DOCKERFILES[name], tags[name], workdir / name)
        return (f"image {DOCKERFILES[name]}: built in {time.monotonic() - start:.0f} s, "
                f"{podman.image_size(tags[name]) / 1e6:.0f} MB (on {podman.base_image()})")

    for name in DOCKERFILES:
        (workdir / name).mkdir()
    try:
        with ThreadPoolExecutor(len(DOCKERFILES)) as pool:
            lines = list(pool.map(build, DOCKERFILES))
        with capture.global_and_fixture_disabled():
            print("\n" + "\n".join(lines), flush=True)
        yield tags
    finally:
        for tag in tags.values():
            podman.podman("rmi", "--force", tag, check=False)


@contextmanager
def operator_image(image: str, tmp_path: Path, env: dict[str, str]) -> Iterator[Operator]:
    """The operator image under podman against a new API emulator, as tests/k8s runs its process."""
    name = podman.PREFIX + secrets.token_hex(4)
    # The harness's settings (DBWORKER_OPERATOR_*, KUBECONFIG) pass from podman's environment;
    # the kubeconfig's folder is mounted at its own path, readable by the image's user. Host
    # network: the emulator is on loopback.
    tmp_path.chmod(0o755)
    command = ["podman", "run", "--rm", f"--name={name}", *podman.hardened(volumes={str(tmp_path): str(tmp_path)}),
               "--env=DBWORKER_OPERATOR_*", "--env=KUBECONFIG", image]
    with running(validators=admission()) as emulator:
        operator = Operator(emulator, tmp_path, env=env, command=command)
        try:
            operator.wait_live()
            yield operator
        finally:
            operator.stop()  # SIGTERM to `podman run`, which passes it to the container
            podman.podman("rm", "--force", "--time=0", name, check=False)
        assert operator.process.returncode == 0, operator.log()[-3000:]
        assert not operator.error_lines(), "\n".join(operator.error_lines())


@pytest.fixture
def op(images: dict[str, str], tmp_path: Path) -> Iterator[Operator]:
    """The operator image, allowed to read the Secrets of the tests' namespace."""
    with operator_image(images["operator"], tmp_path, {"DBWORKER_OPERATOR_SECRET_NAMESPACES": NS}) as operator:
        yield operator


@pytest.fixture
def blind_op(images: dict[str, str], tmp_path: Path) -> Iterator[Operator]:
    """The operator image with no right to read Secrets: it learns of them from the pods."""
    with operator_image(images["operator"], tmp_path, {}) as operator:
        yield operator
