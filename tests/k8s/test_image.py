"""The images' builds (the operator's, the example's): read, not built, so no Docker is needed.

Both build from the repository root. Each Dockerfile has its own ``<Dockerfile>.dockerignore``
(BuildKit reads it instead of the root one): an allowlist that keeps .git, .venv, tests and the
example's deploy/ (its Secret) out of the context, and lets every COPY source in. Dependencies
install before the code is copied (a code change must not reinstall them), the image has a
passwd entry for the uid it runs as, and the base image is a build argument pinned by digest.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "operator" / "Dockerfile", ROOT / "examples" / "imagededup" / "deploy" / "Dockerfile"]
NEVER_IN_CONTEXT = (".git/config", ".venv/bin/python", "tests/k8s/harness.py", "benchmarks/run.py",
                    "dbworker/__pycache__/x.pyc", "examples/imagededup/imagededup.sqlite",
                    "examples/imagededup/deploy/secret.yaml", "examples/imagededup/deploy/api.yaml", ".mypy_cache/x")
RUNS_AS = 10001


def _patterns(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex over slash paths."""
    out, i = "", 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out += "/?"
                i += 1
            continue
        char = pattern[i]
        out += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
        i += 1
    return re.compile(out + "$")


def excluded(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides; ``!`` re-includes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _regex(pattern.removeprefix("!"))
        if any(regex.match(prefix) for prefix in prefixes):
            result = not negated
    return result


def _copied(dockerfile: Path) -> list[str]:
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            sources.extend(word for word in line.split()[1:-1] if not word.startswith("--"))
    return sources


def _files(source: str) -> list[Path]:
    matched = sorted(ROOT.glob(source))
    files = [f for m in matched for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()]
    return [f for f in files if "__pycache__" not in f.parts]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_context_is_an_allowlist_of_what_is_copied(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    relative = dockerfile.relative_to(ROOT)
    assert re.search(rf"^#\s+docker build -f {re.escape(str(relative))} .*\.$", text, flags=re.MULTILINE), \
        "the header says how to build from the repository root"
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.exists(), f"{relative} has no {ignore.name} of its own"
    patterns = _patterns(ignore)
    for source in _copied(dockerfile):
        files = _files(source)
        assert files, f"{relative} copies {source}, which does not exist"
        for file in files:
            assert not excluded(str(file.relative_to(ROOT)), patterns), f"{ignore.name} leaves out {file}"
    for path in NEVER_IN_CONTEXT:
        assert excluded(path, patterns), f"{ignore.name} lets {path} into the build context"


def test_the_matcher_follows_docker(tmp_path: Path) -> None:
    patterns = ["*", "!dbworker/", "!examples/imagededup/*.py", "**/__pycache__"]
    assert excluded("README.md", patterns) and not excluded("dbworker/sql/claims.py", patterns)
    assert not excluded("examples/imagededup/app.py", patterns)
    assert excluded("examples/imagededup/deploy/secret.yaml", patterns)
    assert excluded("dbworker/__pycache__/x.pyc", patterns)


def test_the_root_dockerignore_serves_the_legacy_builder() -> None:
    patterns = _patterns(ROOT / ".dockerignore")
    for path in NEVER_IN_CONTEXT:
        assert excluded(path, patterns), path
    for path in ("examples/imagededup/app.py", "examples/imagededup/requirements.txt", "dbworker/redact.py",
                 "operator/dbworker_operator/handlers.py"):
        assert not excluded(path, patterns), path


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dependencies_install_before_the_code_is_copied(dockerfile: Path) -> None:
    lines = dockerfile.read_text().splitlines()
    first_code = next(i for i, line in enumerate(lines) if line.startswith("COPY dbworker "))
    installs = [i for i, line in enumerate(lines) if "pip install" in line and "-r " in line]
    assert installs and max(installs) < first_code, "every dependency is installed before any code is copied"
    code_installs = [line for line in lines[first_code:] if "pip install" in line]
    assert code_installs and all("--no-deps" in line for line in code_installs), \
        "after the code is copied, only the code is installed"


def test_the_images_install_what_the_distributions_declare() -> None:
    operator = tomllib.loads((ROOT / "operator" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(dep.startswith("dbworker>=") for dep in operator), "the operator needs the library (dbworker.redact)"
    example = (DOCKERFILES[1]).read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("postgresql", "mysql", "pod", "console"):  # console: the hash Worker's spec.console
        assert extra in extras and f"'{extra}'" in example


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_user_is_numeric_with_a_passwd_entry(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    users = re.findall(r"^USER\s+(\S+)$", text, flags=re.MULTILINE)
    assert users == [f"{RUNS_AS}:{RUNS_AS}"], "one numeric non-root user, so runAsNonRoot can be verified"
    assert re.search(rf"useradd .*--uid {RUNS_AS} .*--user-group", text), "a passwd and group entry for it"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_base_image_is_an_argument_pinned_by_digest(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    [default] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", default), default
    assert re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE) == ["${PYTHON_IMAGE}"]
    assert "--build-arg PYTHON_IMAGE=" in text, "the header says how to override it"
    # One base for both images: a bump changes both.
    assert default in DOCKERFILES[0].read_text() and default in DOCKERFILES[1].read_text()
