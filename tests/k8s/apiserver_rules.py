"""What the API server checks on a Worker before anyone sees it: the CRD's schema and CEL rules.

JSON Schema (draft 4, as OpenAPI v3.0 keeps ``exclusiveMinimum`` boolean) on the structural
schema, then every ``x-kubernetes-validations`` rule evaluated with cel-python. Used by the
CRD tests and by the emulator, so a bad Worker is refused at the door as in a real cluster.
"""

from __future__ import annotations

from typing import Any

import celpy
import jsonschema
from dbworker_operator import crd

SCHEMA = crd.worker_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _to_cel_json(schema: dict[str, Any], value: Any) -> Any:
    """Values as the API server hands them to CEL: `number` fields are doubles even if written 10."""
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else {}
        return {k: _to_cel_json(props.get(k, extra or {}), v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cel_json(schema.get("items") or {}, v) for v in value]
    return value


def cel_violations(schema: dict[str, Any], value: Any) -> list[str]:
    """Evaluate every x-kubernetes-validations rule that applies to ``value``, as the API server would."""
    found: list[str] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations") or []:
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(_to_cel_json(schema, value))}):  # type: ignore[attr-defined]
            found.append(rule["message"])
    if isinstance(value, dict):
        for key, item in value.items():
            sub = (schema.get("properties") or {}).get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                found.extend(cel_violations(sub, item))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            found.extend(cel_violations(schema["items"], item))
    return found


def check(body: dict[str, Any]) -> list[str]:
    """What the API server would say about ``body``: schema errors, then CEL rule messages."""
    validator = jsonschema.Draft4Validator(SCHEMA)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]
    return errors or cel_violations(SCHEMA, body)
