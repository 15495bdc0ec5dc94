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
        "PAUSED",
    ]
    assert lines[1].split() == ["hash", "1", "2", "30", "0", "1000+"]
    assert lines[2].split() == ["compare", "0", "0", "0", "4", "0", "yes"]
