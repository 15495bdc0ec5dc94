"""Whether an owned object drifted from what the operator wants, and the patch that restores it.

Pure. The API server adds defaults (``protocol: TCP``, ``imagePullPolicy``...), so "matches"
means every field we set has our value; lists must match item by item. Fields we set before
and no longer want are nulled out, using the last applied manifest kept in an annotation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

LAST_APPLIED = "dbworker.dev/last-applied"


def contains(actual: Any, wanted: Any) -> bool:
    """True when ``actual`` holds every field of ``wanted`` with the same value."""
    if isinstance(wanted, Mapping):
        if not isinstance(actual, Mapping):
            return False
        return all(key in actual and contains(actual[key], value) for key, value in wanted.items())
    if isinstance(wanted, list):
        if not isinstance(actual, list) or len(actual) != len(wanted):
            return False
        return all(contains(a, w) for a, w in zip(actual, wanted, strict=True))
    return bool(actual == wanted)


# Fields another controller may own once we stop setting them (KEDA owns spec.replicas):
# leaving them out of a manifest must not delete them.
NEVER_REMOVED = frozenset({("spec", "replicas")})


def removals(last: Any, wanted: Any, path: tuple[str, ...] = ()) -> Any:
    """``wanted`` with None (merge-patch "delete") for every dict key ``last`` had and it lacks."""
    if not isinstance(wanted, Mapping):
        return wanted
    result: dict[str, Any] = {}
    previous = last if isinstance(last, Mapping) else {}
    for key, value in wanted.items():
        result[key] = removals(previous.get(key), value, (*path, key))
    for key in previous:
        if key not in wanted and (*path, key) not in NEVER_REMOVED:
            result[key] = None
    return result


def annotate(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with its own JSON (sans that annotation) in the last-applied annotation."""
    body = json.loads(json.dumps(manifest))
    meta = body.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(LAST_APPLIED, None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    meta.setdefault("annotations", {})[LAST_APPLIED] = text
    return dict(body)


def last_applied(actual: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest we last applied to ``actual`` ({} when unknown or unreadable)."""
    text = ((actual.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def restore_patch(actual: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch taking ``actual`` to ``wanted``, or None when nothing drifted.

    ``wanted`` must carry the last-applied annotation (see ``annotate``).
    """
    if contains(actual, wanted):
        return None
    patch = removals(last_applied(actual), wanted)
    return dict(patch)


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s fields added (dicts merge recursively), both left unchanged."""
    result = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = json.loads(json.dumps(value))
    return dict(result)


def owned_by(actual: Mapping[str, Any], owner_uid: str) -> bool:
    refs = (actual.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid for ref in refs)
