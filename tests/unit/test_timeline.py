"""The console's attempt timeline positions (``dbworker.console.timeline``), without a server."""

from __future__ import annotations

import datetime as dt

from dbworker.console import timeline

T = dt.datetime(2026, 12, 2, 10, 0, 0)


def _s(seconds: float) -> dt.datetime:
    return T + dt.timedelta(seconds=seconds)


def test_bars_share_one_axis_from_the_first_start_to_the_last_end() -> None:
    spans = [(_s(0), _s(10)), (_s(20), _s(30)), (_s(90), _s(100))]
    assert timeline.bars(spans) == [(0, 100), (199, 100), (896, 100)]
    assert timeline.axis(spans) == (_s(0), _s(100))


def test_short_unknown_and_reversed_attempts_still_show_inside_the_axis() -> None:
    bars = timeline.bars([(_s(0), _s(0.001)), (None, _s(50)), (_s(101), _s(100))])
    assert bars[0] == (0, timeline.MIN_BAR)
    assert bars[1] == (498, timeline.MIN_BAR)  # no start: a short bar at its end
    x, width = bars[2]
    assert x + width <= timeline.WIDTH and width == timeline.MIN_BAR
    assert all(x >= 0 and x + w <= timeline.WIDTH for x, w in bars)


def test_one_instant_fills_the_axis_and_none_draws_nothing() -> None:
    assert timeline.bars([(_s(5), _s(5))]) == [(0, timeline.WIDTH)]
    assert timeline.bars([]) == [] and timeline.axis([]) is None
