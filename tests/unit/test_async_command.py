"""``--processes NAME=N`` and ``DBWORKER_PROCESSES`` of ``dbworker run`` (pod/app.py, pod/options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbworker.pod import app, options, termination
from tests.apps import asyncapp, basic


def _run(*argv: str, **env: str) -> options.Options:
    return options.parse(["run", "a:c", *argv], env)


def test_processes_flag_and_variable_set_an_async_workers_processes(tmp_path: Path) -> None:
    c = asyncapp.build(f"sqlite:///{tmp_path / 'a.db'}", concurrency=8)
    assert c.workers["items"].concurrency == 8
    app.apply_overrides(c, _run("--concurrency", "items=200", "--processes", "items=2"))
    [w] = c.registrations()
    assert (w.concurrency, w.process_count) == (200, 2)
    app.apply_overrides(c, _run(DBWORKER_PROCESSES="items=3"))
    [w] = c.registrations()
    assert w.process_count == 3


def test_processes_is_checked_with_the_flag_named(tmp_path: Path) -> None:
    c = asyncapp.build(f"sqlite:///{tmp_path / 'a.db'}", concurrency=2)
    with pytest.raises(termination.CommandError, match=r"^--processes: processes of worker 'items' must be at most its concurrency \(2\)"):
        app.apply_overrides(c, _run("--processes", "items=3"))
    with pytest.raises(termination.CommandError, match=r"unknown worker 'nope' in DBWORKER_PROCESSES") as unknown:
        app.apply_overrides(c, _run(DBWORKER_PROCESSES="nope=2"))
    assert unknown.value.reason == termination.UNKNOWN_WORKER
    with pytest.raises(termination.CommandError, match=r"malformed --processes 'items=0'"):
        _run("--processes", "items=0")
    sync = basic.build(f"sqlite:///{tmp_path / 'b.db'}", concurrency=2)
    with pytest.raises(termination.CommandError, match=r"must equal its concurrency \(2\) for a sync handler"):
        app.apply_overrides(sync, _run("--processes", "items=1"))
    app.apply_overrides(sync, _run("--concurrency", "items=5"))  # a sync worker's processes follow
    [w] = sync.registrations()
    assert w.process_count == 5
