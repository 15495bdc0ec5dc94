"""Fixtures of the image checks: both shipped images built once per run, removed at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.images import podman

DOCKERFILES = {"worker": "examples/imagededup/deploy/Dockerfile", "operator": "operator/Dockerfile"}


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """name -> tag of every Dockerfile the repository ships, built on the tests' base."""
    workdir = tmp_path_factory.mktemp("build")
    tags: dict[str, str] = {}
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    try:
        for name, dockerfile in DOCKERFILES.items():
            tag = f"localhost/{podman.PREFIX}{name}:{workdir.name}"
            start = time.monotonic()
            podman.build(dockerfile, tag, workdir)
            tags[name] = tag
            line = (f"image {dockerfile}: built in {time.monotonic() - start:.0f} s, "
                    f"{podman.image_size(tag) / 1e6:.0f} MB (on {podman.base_image()})")
            with capture.global_and_fixture_disabled():
                print(f"\n{line}", flush=True)
        yield tags
    finally:
        for tag in tags.values():
            podman.podman("rmi", "--force", tag, check=False)
