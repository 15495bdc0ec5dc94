"""Relative links in the repository's Markdown point to files, and anchors to headings, that exist.

The docs stand alone: a user who clones the project can follow every link in the README and
under docs/ (and the other READMEs) without leaving it. Web addresses are not fetched.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "node_modules", "results", ".pytest_cache", ".mypy_cache"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_files() -> list[Path]:
    return sorted(
        p for p in ROOT.rglob("*.md")
        if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
    )


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a link in a code sample is not a link)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(path: Path) -> list[str]:
    broken = []
    for line in prose_lines(path):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = unquote(target).partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.is_relative_to(ROOT):
                broken.append(f"{target}: outside the repository")
            elif not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading with the anchor #{anchor}")
    return broken


def test_the_slug_is_githubs() -> None:
    assert slug("Upgrading from 0.0.1") == "upgrading-from-001"
    assert slug("PgBouncer / CloudNativePG") == "pgbouncer--cloudnativepg"
    assert slug("Scheduled and periodic work: `due=`, `coordinator.periodic`") == (
        "scheduled-and-periodic-work-due-coordinatorperiodic"
    )


@pytest.mark.parametrize(
    "path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT))
)
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == [], path.relative_to(ROOT)
