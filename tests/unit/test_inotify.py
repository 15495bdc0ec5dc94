"""wakeups.inotify: the kernel's reports of writes to named files (Linux inotify)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbworker.wakeups.inotify import DirectoryWrites

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def _append(path: Path, times: int = 1) -> None:
    for _ in range(times):
        with path.open("ab") as f:
            f.write(b"x")


@pytest.fixture
def writes(tmp_path: Path) -> Iterator[DirectoryWrites]:
    watch = DirectoryWrites.open(str(tmp_path), ["db", "db-wal"])
    assert watch is not None
    yield watch
    watch.close()


def test_a_write_to_a_named_file_is_reported(tmp_path: Path, writes: DirectoryWrites) -> None:
    assert not writes.wait(0)
    _append(tmp_path / "db-wal")  # created, then written: both reported before write() returns
    assert writes.wait(5)


def test_writes_to_other_files_are_not(tmp_path: Path, writes: DirectoryWrites) -> None:
    _append(tmp_path / "db-shm")
    _append(tmp_path / "other")
    assert not writes.wait(0)


def test_a_burst_of_writes_is_reported_once(tmp_path: Path, writes: DirectoryWrites) -> None:
    _append(tmp_path / "db", times=100)
    assert writes.wait(5)
    assert not writes.wait(0)


def test_no_directory_means_no_watch(tmp_path: Path) -> None:
    assert DirectoryWrites.open(str(tmp_path / "missing"), ["db"]) is None
