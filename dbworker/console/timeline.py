"""The item page's attempt timeline: where each attempt's bar sits on one shared time axis.

Pure: from the attempts' start and end times to positions in a fixed-width SVG (``WIDTH``
units, drawn with attributes, not inline styles, as the console's CSP forbids those). The
page (``templates/item.html``) draws the bars; ``queries.item`` calls ``bars``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

WIDTH = 1000  # the SVG's width in its own units
MIN_BAR = 4  # an attempt of a few milliseconds still shows


def bars(spans: Sequence[tuple[dt.datetime | None, dt.datetime]]) -> list[tuple[int, int]]:
    """``(x, width)`` per ``(started_at, ended_at)`` on an axis from the first start to the
    last end; an unknown start is drawn as a short bar ending at its end. Ends before starts
    (two clocks: the pod's start, the database's end) are drawn from the end."""
    if not spans:
        return []
    starts = [min(s, e) if s is not None else e for s, e in spans]
    first, last = min(starts), max(e for _, e in spans)
    total = (last - first).total_seconds()
    result = []
    for start, (_, end) in zip(starts, spans, strict=True):
        if total <= 0:
            result.append((0, WIDTH))
            continue
        x = round((start - first).total_seconds() / total * (WIDTH - MIN_BAR))
        width = max(MIN_BAR, round((end - start).total_seconds() / total * WIDTH))
        result.append((x, min(width, WIDTH - x)))
    return result


def axis(spans: Sequence[tuple[dt.datetime | None, dt.datetime]]) -> tuple[dt.datetime, dt.datetime] | None:
    """The first start and the last end the bars are drawn between (None: no attempt)."""
    if not spans:
        return None
    return min(min(s, e) if s is not None else e for s, e in spans), max(e for _, e in spans)
