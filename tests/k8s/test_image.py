"""The operator image's build: from the repository root, the library and the operator, nothing else.

No Docker needed: the Dockerfile's COPY sources must exist from the root and survive the root
.dockerignore, and what it installs must be exactly the two distributions' dependencies.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "operator" / "Dockerfile"


def _copied() -> list[str]:
    sources: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            sources.extend(line.split()[1:-1])
    return sources


def _ignored(path: str) -> bool:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = Path(path).parts
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            return True
        if pattern.startswith("**/") and any(fnmatch.fnmatch(part, bare) for part in parts):
            return True
    return False


def test_the_build_context_is_the_repository_root() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^#\s+docker build -f operator/Dockerfile .* \.$", text, flags=re.MULTILINE), \
        "the header says how to build from the repository root"
    sources = _copied()
    assert {"pyproject.toml", "README.md", "dbworker", "operator/pyproject.toml", "operator/README.md",
            "operator/dbworker_operator"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), f"operator/Dockerfile copies {source}, which does not exist"
        assert not _ignored(source), f"operator/Dockerfile copies {source}, which .dockerignore leaves out"


def test_the_root_dockerignore_keeps_the_context_to_sources() -> None:
    for path in (".git", ".venv", "tests/k8s", "benchmarks/run.py", "dbworker/__pycache__/x.pyc",
                 "examples/imagededup/imagededup.sqlite", ".mypy_cache"):
        assert _ignored(path), path
    # The example image builds from the root too: its sources stay in the context.
    for path in ("examples/imagededup/app.py", "examples/imagededup/requirements.txt", "dbworker/redact.py"):
        assert not _ignored(path), path


def test_dependencies_install_before_the_code_is_copied() -> None:
    lines = DOCKERFILE.read_text().splitlines()
    first_code = next(i for i, line in enumerate(lines) if line.startswith("COPY dbworker "))
    install = next(i for i, line in enumerate(lines) if "pip install -r" in line)
    assert install < first_code
    operator = tomllib.loads((ROOT / "operator" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(dep.startswith("dbworker>=") for dep in operator), "the operator needs the library (dbworker.redact)"
