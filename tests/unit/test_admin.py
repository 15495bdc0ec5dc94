"""Unit tests of dbworker.pod.admin that need no database: the ``inspect`` table."""

from __future__ import annotations

from dbworker.pod import admin


def test_render_table() -> None:
    report = [
        {"worker": "hash", "counts": {"working": 1, "unfinished": 2, "finished": 30, "failed": 0}, "claimable": 1000, "claimable_capped": True},
        {"worker": "compare", "counts": {"working": 0, "unfinished": 0, "finished": 0, "failed": 4}, "claimable": 0, "claimable_capped": False, "paused": True},
    ]  # fmt: skip
    lines = admin.render_table(report).splitlines()
    assert lines[0].split() == [
        "WORKER",
        "WORKING",
        "UNFINISHED",
        "FINISHED",
        "FAILED",
        "CLAIMABLE",
        "ON-LIMIT",
        "PAUSED",
    ]
    assert lines[1].split() == ["hash", "1", "2", "30", "0", "1000+", "-"]
    assert lines[2].split() == ["compare", "0", "0", "0", "4", "0", "-", "yes"]


def test_render_table_and_keys_of_workers_with_limits() -> None:
    report = [
        {"worker": "export", "counts": {"working": 2, "unfinished": 9, "finished": 0, "failed": 0}, "claimable": 1,
         "claimable_capped": False, "waiting_on_limit": 8, "waiting_on_limit_capped": False,
         "limit_keys": [{"key": "42", "waiting": 6, "held": 2}, {"key": "7", "waiting": 2, "held": 2}]},
        {"worker": "bulk", "counts": {"working": 0, "unfinished": 5000, "finished": 0, "failed": 0}, "claimable": 0,
         "claimable_capped": False, "waiting_on_limit": 1000, "waiting_on_limit_capped": True, "limit_keys": []},
    ]  # fmt: skip
    lines = admin.render_table(report).splitlines()
    assert lines[1].split() == ["export", "2", "9", "0", "0", "1", "8"]
    assert lines[2].split() == ["bulk", "0", "5000", "0", "0", "0", "1000+"]
    assert admin.render_limit_keys(report).splitlines() == ["  export: '42' 6 waiting, 2 held, '7' 2 waiting, 2 held"]


def test_render_async_lists_async_workers_and_their_processes() -> None:
    report = [
        {"worker": "hash", "concurrency": 4, "processes": 4, "async": False},
        {"worker": "hooks", "concurrency": 200, "processes": 2, "async": True},
        {"worker": "one", "concurrency": 8, "processes": 1, "async": True},
    ]
    assert admin.render_async(report).splitlines() == [
        "  hooks: 200 coroutines in 2 handler processes per pod",
        "  one: 8 coroutines in 1 handler process per pod",
    ]
    assert admin.render_async(report[:1]) == ""
