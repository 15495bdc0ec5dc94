"""Both shipped Dockerfiles build on the tests' base, and each image holds only what it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.images import podman
from tests.images.conftest import DOCKERFILES

# Run inside an image: what it carries, as JSON.
INVENTORY = r"""
import hashlib, importlib.util, json, os, shutil, sys
def files(top):
    return sorted(os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs)
mounts = json.loads(sys.argv[1])
print(json.dumps({
    "compilers": [c for c in ("gcc", "cc", "c++", "g++", "clang", "as", "ld") if shutil.which(c)],
    "tests_package": importlib.util.find_spec("tests") is not None,
    "app": files("/app") if os.path.isdir("/app") else [],
    "src": os.path.exists("/src"),
    "yaml": [p for top in ("/app", "/usr/local/lib") for p in files(top) if p.endswith((".yaml", ".yml"))
             and "secret" in p] if os.path.isdir("/app") else [],
    "ca": hashlib.sha256(open("/etc/ssl/certs/ca-certificates.crt", "rb").read()).hexdigest(),
    "build_mounts_with_content": [m for m in mounts if (os.path.isfile(m) and os.path.getsize(m))
                                  or (os.path.isdir(m) and files(m))],
}))
"""


def _inventory(image: str, tmp_path: Path) -> dict[str, object]:
    mounts = [option.rsplit(":", 2)[1] for option in podman.pip_build_options(tmp_path)
              if not option.endswith("ca-certificates.crt:ro")]
    result = podman.podman("run", "--rm", *podman.hardened(), "--entrypoint=python", image,
                           "-c", INVENTORY, json.dumps(mounts))
    return dict(json.loads(result.stdout))


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_runs_as_its_numeric_non_root_user(images: dict[str, str], name: str) -> None:
    # Kubernetes can verify runAsNonRoot only for a numeric USER.
    assert podman.image_user(images[name]) == "10001:10001"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_carries_no_compiler_tests_sources_or_build_secrets(
        images: dict[str, str], name: str, tmp_path: Path) -> None:
    found = _inventory(images[name], tmp_path)
    assert found["compilers"] == []
    assert found["tests_package"] is False and found["src"] is False
    assert found["yaml"] == []
    # The build's CA bundle and pip configuration were mounted into its RUN steps only: the
    # image keeps its base's CA bundle, and mount points the builder leaves are empty.
    base = podman.podman("run", "--rm", podman.base_image(), "sha256sum",
                         "/etc/ssl/certs/ca-certificates.crt").stdout.split()[0]
    assert found["ca"] == base
    assert found["build_mounts_with_content"] == []
    if name == "worker":
        # The example's modules, never its deploy/ folder (manifests, the Secret).
        assert found["app"] == ["examples/__init__.py"] + [
            f"examples/imagededup/{p.name}" for p in sorted((podman.ROOT / "examples/imagededup").glob("*.py"))]
