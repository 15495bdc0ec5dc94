"""Whether this operator replica may run the periodic resync, by kopf's own peering rule.

Pure. kopf pauses its watchers when a live peer has a higher priority (or the same one);
the resync loop is ours, not kopf's, so it reads the same peering object and obeys the same
rule. Without peering (standalone) the loop always runs.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def _alive(info: Mapping[str, Any], now: datetime.datetime) -> bool:
    try:
        lastseen = datetime.datetime.fromisoformat(str(info["lastseen"]))
        lifetime = datetime.timedelta(seconds=int(info.get("lifetime", 60)))
    except (KeyError, ValueError, TypeError):
        return False
    if lastseen.tzinfo is None:
        lastseen = lastseen.replace(tzinfo=datetime.UTC)
    return lastseen + lifetime > now


def may_act(peering: Mapping[str, Any] | None, *, identity: str, priority: int,
            now: datetime.datetime | None = None) -> bool:
    """True unless another live peer in ``peering.status`` has a priority >= ours."""
    now = now or datetime.datetime.now(datetime.UTC)
    peers = (peering or {}).get("status") or {}
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, Mapping) or not _alive(info, now):
            continue
        if int(info.get("priority", 0)) >= priority:
            return False
    return True
