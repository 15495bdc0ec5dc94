"""Reading one field of a Worker's spec dict: its type checked, its default filled in, its value
held to the CRD schema's own bounds (minimum, maximum, lengths, counts, patterns, choices).

The bounds are read from crd.spec_schema(), so the operator refuses exactly what the API server
refuses, also for a Worker admitted by an older CRD. Every error is a ``SpecError`` naming the
spec path, the bound and the fix. spec.py and autoscaling_spec.py read through these; what the
fields mean together is theirs.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from dbworker_operator import crd, rules


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
    check_value(schema_of(path), node, f"spec.{path}", patterns=False)
    return node


@functools.cache
def _spec_schema() -> dict[str, Any]:
    return crd.spec_schema()


def schema_of(path: str) -> Mapping[str, Any]:
    """The CRD's schema node of ``spec.<path>`` (dotted; map keys go through additionalProperties),
    or {} where the schema says nothing."""
    node: Mapping[str, Any] = _spec_schema()
    for part in path.split("."):
        properties = node.get("properties") or {}
        if part in properties:
            node = properties[part]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return {}
    return node


def _allowed_range(schema: Mapping[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    kind = "an integer" if schema.get("type") == "integer" else "a number"
    parts = []
    if low is not None:
        parts.append(f"{'>' if schema.get('exclusiveMinimum') is True else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    return f"{kind} {' and '.join(parts)}".rstrip()


def check_value(schema: Mapping[str, Any], value: Any, where: str, *, patterns: bool = True) -> None:
    """Raise ``SpecError`` when ``value`` breaks a bound of its schema node (types are the
    readers' to check: a value of another type passes here). ``patterns=False`` leaves patterns
    and choices to the reader, whose message says what the field should look like."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{where} is {value}; use {_allowed_range(schema)}")
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and (value < low or (schema.get("exclusiveMinimum") is True and value == low))) \
                or (high is not None and value > high):
            raise SpecError(f"{where} is {value:g}; use {_allowed_range(schema)} (the bounds the library, the "
                            "databases and the OS can hold; the operator's README lists them)")
    elif isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SpecError(f"{where} has {len(value)} characters; shorten it to at most {schema['maxLength']}")
        if patterns and "enum" in schema and value not in schema["enum"]:
            raise SpecError(f"{where}: {value!r}; use one of {', '.join(map(str, schema['enum']))}")
        if patterns and "pattern" in schema and not re.search(schema["pattern"], value):
            raise SpecError(f"{where}: {value!r} does not match {schema['pattern']}")
    elif isinstance(value, list | Mapping):
        most = schema.get("maxItems" if isinstance(value, list) else "maxProperties")
        if most is not None and len(value) > most:
            raise SpecError(f"{where} has {len(value)} entries; keep at most {most}")


def check_tree(value: Any, where: str = "spec", schema: Mapping[str, Any] | None = None) -> None:
    """``check_value`` on ``value`` (the whole spec by default) and everything in it the schema describes."""
    schema = _spec_schema() if schema is None else schema
    check_value(schema, value, where)
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                check_tree(item, f"{where}.{key}", sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            check_tree(item, f"{where}[{i}]", schema["items"])


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


def count(spec: Mapping[str, Any], path: str, *, default: int | None) -> int | None:
    """An integer within the schema's bounds."""
    return get(spec, path, int, default)  # type: ignore[no-any-return]


def seconds(spec: Mapping[str, Any], path: str) -> float | None:
    """A number of seconds within the schema's bounds (more than 0, at most rules.MAX_SECONDS)."""
    value = get(spec, path, (int, float))
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


def annotation_map(spec: Mapping[str, Any], path: str) -> dict[str, str]:
    """A map of annotations: keys qualified names, values and count within the schema's bounds."""
    found = string_map(spec, path)
    for key in found:
        if len(key) > rules.MAX_ANNOTATION_KEY or not re.match(rules.LABEL_KEY_PATTERN, key):
            raise SpecError(f"spec.{path}: {key[:80]!r} is not an annotation key; use [prefix/]name, the name at "
                            f"most 63 letters, digits, -_. (at most {rules.MAX_ANNOTATION_KEY} characters in all)")
    return found


def budget_value(spec: Mapping[str, Any], path: str) -> int | str | None:
    value = get(spec, path, (int, str))
    if isinstance(value, int) and not 0 <= value <= rules.MAX_PODS:
        raise SpecError(f"spec.{path} is {value}; use a count of pods from 0 to {rules.MAX_PODS} or a percentage "
                        "such as 25%")
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

