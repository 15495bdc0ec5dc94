"""Poll waits: the end of a burst does not push the next poll to ``max_poll_seconds``.

After a burst, completions wake the loop and find nothing; those empty wake-ups keep the
current wait, and only timed polls double it (0.2, 0.4, 0.8 s ...). With a 120 s ceiling, an
item added shortly after a burst is found by a poll long before the ceiling would allow.
"""

from __future__ import annotations

from dbworker import ExecutionStatus
from tests.integration.conftest import App


def test_end_of_a_burst_keeps_short_polls(app: App) -> None:
    c = app.coordinator(concurrency=2, poll_seconds=0.2, max_poll_seconds=120)
    burst = app.add(*["finish"] * 40)
    c.start()
    app.wait_status(burst, (ExecutionStatus.FINISHED,))
    [late] = app.add("finish")
    # Bounded far under the 120 s ceiling: only a short poll can find it in time.
    app.wait_status([late], (ExecutionStatus.FINISHED,), timeout=10)
