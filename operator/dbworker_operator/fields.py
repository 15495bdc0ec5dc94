"""Reading one field of a Worker's spec dict: its type checked, its default filled in.

Every error is a ``SpecError`` naming the spec path and the fix. spec.py and autoscaling_spec.py
read through these; what the fields mean together is theirs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dbworker_operator import rules


class SpecError(ValueError):
    """A Worker spec the operator cannot build from; the message names the field and the fix."""



def get(spec: Mapping[str, Any], path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """Read ``spec.<path>`` (dotted), checking its type; ``default`` when absent or null."""
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return default
        node = node.get(part)
        if node is None:
            return default
    # bool is an int in Python; a count given as true/false is a mistake, not a 1/0.
    if isinstance(node, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise SpecError(f"spec.{path}: expected {kind_name(kind)}, got a boolean")
    if not isinstance(node, kind):
        raise SpecError(f"spec.{path}: expected {kind_name(kind)}, got {type(node).__name__}")
    return node


def kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
             dict: "an object", list: "a list", Mapping: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def required(spec: Mapping[str, Any], path: str, fix: str) -> str:
    value = get(spec, path, str)
    if not value:
        raise SpecError(f"spec.{path} is required: {fix}")
    return str(value)


def count(spec: Mapping[str, Any], path: str, *, minimum: int, default: int | None) -> int | None:
    value = get(spec, path, int, default)
    if value is not None and value < minimum:
        raise SpecError(f"spec.{path} is {value}; it must be >= {minimum}")
    return value  # type: ignore[no-any-return]


def seconds(spec: Mapping[str, Any], path: str) -> float | None:
    value = get(spec, path, (int, float))
    if value is not None and value <= 0:
        raise SpecError(f"spec.{path} is {value}; it must be > 0 seconds")
    return None if value is None else float(value)


def objects(spec: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], ...]:
    items = get(spec, path, list, [])
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise SpecError(f"spec.{path}[{i}]: expected an object, got {type(item).__name__}")
    return tuple(items)


def string_map(spec: Mapping[str, Any], path: str) -> dict[str, str]:
    values = get(spec, path, Mapping, {})
    for key, value in values.items():
        if not isinstance(value, str):
            raise SpecError(f"spec.{path}.{key}: expected a string, got {type(value).__name__}")
    return dict(values)


def worker_name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not re.match(rules.WORKER_NAME_PATTERN, value):
        raise SpecError(f"spec.{path}: {value!r} is not a worker name; use [a-z][a-z0-9_]*")
    return value


def valid_label_key(key: str) -> bool:
    return len(key) <= 316 and re.match(rules.LABEL_KEY_PATTERN, key) is not None


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and re.match(rules.LABEL_VALUE_PATTERN, value) is not None


def labels(spec: Mapping[str, Any], path: str) -> dict[str, str]:
    labels = string_map(spec, path)
    for key, value in labels.items():
        if not valid_label_key(key):
            raise SpecError(f"spec.{path}: {key!r} is not a label key; use [prefix/]name, e.g. release")
        if not valid_label_value(value):
            raise SpecError(f"spec.{path}.{key}: {value!r} is not a label value (at most 63 letters, digits, -_.)")
    return labels


def budget_value(spec: Mapping[str, Any], path: str) -> int | str | None:
    value = get(spec, path, (int, str))
    if isinstance(value, int) and value < 0:
        raise SpecError(f"spec.{path} is {value}; use a count >= 0 or a percentage such as 25%")
    if isinstance(value, str) and not re.match(rules.PERCENT_PATTERN, value):
        raise SpecError(f"spec.{path}: {value!r} is not a whole percentage from 0% to 100%, such as 25%")
    return value  # type: ignore[no-any-return]


# Which securityContext fields a Worker may set (schemas.py's security contexts), and their minimum values.
ID_FIELDS = {"runAsUser": 1, "runAsGroup": 0, "fsGroup": 0}


def security_context(spec: Mapping[str, Any], path: str, allowed: Mapping[str, Any]) -> dict[str, Any]:
    """A securityContext with only the fields ``allowed`` (a schema's properties), values checked."""
    context = dict(get(spec, path, Mapping, {}))
    for key, value in context.items():
        if key not in allowed:
            raise SpecError(f"spec.{path}.{key} cannot be set: the pods keep the restricted Pod Security "
                            f"Standard; use one of {', '.join(sorted(allowed))}")
        if key in ID_FIELDS and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < ID_FIELDS[key]):
            raise SpecError(f"spec.{path}.{key}: {value!r} must be an integer >= {ID_FIELDS[key]}"
                            + (" (never root)" if key == "runAsUser" else ""))
        if key == "seccompProfile":
            profile = value if isinstance(value, Mapping) else {}
            if profile.get("type") not in ("RuntimeDefault", "Localhost") or \
                    (profile.get("type") == "Localhost") != bool(profile.get("localhostProfile")):
                raise SpecError(f"spec.{path}.seccompProfile: use {{type: RuntimeDefault}} or "
                                "{type: Localhost, localhostProfile: <file>}")
    return context


def quantity(spec: Mapping[str, Any], path: str, default: str) -> str:
    value = get(spec, path, (int, str), default)
    text = str(value)
    if not re.match(rules.QUANTITY_PATTERN, text):
        raise SpecError(f"spec.{path}: {text!r} is not a quantity such as 512Mi or 2Gi")
    return text

