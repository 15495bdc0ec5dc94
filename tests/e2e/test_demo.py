"""`make demo` end to end: the demo command runs without a terminal and says what it did.

The demo starts and stops its own API, worker service and console; this runs it as CI would
(no TTY, output captured, so it does not wait for Enter) on a smaller sample set and checks its
report, not its timing.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from examples.imagededup import demo


@pytest.mark.slow
def test_demo_runs_unattended_and_reports() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.imagededup.demo", "--groups", "3", "--timeout", "90"],
        cwd=demo.ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        stdin=subprocess.DEVNULL,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "uploaded 11 images (3 originals" in out
    assert "hashes [########################] 11/11 (1 failed)" in out  # the bar, printed as lines
    assert "UnreadableImageError: image" in out and "HashFailedError: duplicate query" in out
    assert "all 3 groups of near-duplicates found exactly; 11/11 queries finished" in out
    assert 'dbworker_executions_total{outcome="unfinished",worker="compare"}' in out
    # The console, started for the example on loopback, showed the failure it left behind.
    assert re.search(r"console: http://127\.0\.0\.1:\d+/ \(dbworker console examples\.imagededup\.app:coordinator; "
                     r"loopback only, so no token\)", out), out
    assert re.search(r"left failed to look at: image 12 \(left-failed\.png\), its hash at "
                     r"http://127\.0\.0\.1:\d+/workers/hash/items/12\n", out), out
    assert "worker service: stopped cleanly" in out and "API: stopped cleanly" in out
    assert "console: stopped cleanly" in out
    assert "\r" not in out  # no in-place redraws without a terminal


def test_demo_rejects_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.imagededup.demo", "--groups", "0"],
        cwd=demo.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--groups must be at least 1, got 0" in result.stderr
