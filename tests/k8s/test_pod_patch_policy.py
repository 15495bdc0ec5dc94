"""The admission policy that narrows the operator's `patch pods`, evaluated as the API server would.

Each of install.pod_patch_policy()'s CEL expressions is run with cel-python on an old and a new
pod: the deletion-cost annotation may change (to an integer); the spec, labels, other
annotations, finalizers and owner references may not.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dbworker_operator import install, labels

celpy = pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL expressions")

COST = labels.DELETION_COST
POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "w-abc-1", "namespace": "apps", "labels": {"app.kubernetes.io/instance": "w"},
                 "annotations": {"example.com/owner": "media"},
                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w-abc", "uid": "u"}]},
    "spec": {"containers": [{"name": "worker", "image": "registry.example/app:1.0"}]},
}


def refused(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The messages of the validations that deny updating ``old`` to ``new``."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
    found = []
    for validation in install.pod_patch_policy()["validations"]:
        program = env.program(env.compile(validation["expression"]))
        if not program.evaluate(activation):
            found.append(validation["message"])
    return found


def changed(**edits: Any) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    for path, value in edits.items():
        node = pod
        *parents, last = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return pod


def test_the_deletion_cost_may_be_set_and_changed() -> None:
    first = changed(metadata__annotations={"example.com/owner": "media", COST: "3"})
    assert refused(POD, first) == []
    assert refused(first, changed(metadata__annotations={"example.com/owner": "media", COST: "0"})) == []
    bare = changed(metadata__annotations=None)
    assert refused(bare, changed(metadata__annotations={COST: "-2"})) == []


@pytest.mark.parametrize(("edit", "why"), [
    ({"spec__containers": [{"name": "worker", "image": "evil:latest"}]}, "spec"),
    ({"metadata__labels": {"app.kubernetes.io/instance": "other"}}, "labels"),
    ({"metadata__labels": None}, "labels"),
    ({"metadata__annotations": {"example.com/owner": "someone-else", COST: "1"}}, "annotation"),
    ({"metadata__annotations": {COST: "1"}}, "annotation"),  # removes another annotation
    ({"metadata__annotations": {"example.com/owner": "media", "new": "x"}}, "annotation"),
    ({"metadata__annotations": {"example.com/owner": "media", COST: "many"}}, "integer"),
    ({"metadata__finalizers": ["example.com/hold"]}, "finalizers"),
    ({"metadata__ownerReferences": None}, "owner references"),
])
def test_anything_else_is_refused(edit: dict[str, Any], why: str) -> None:
    messages = refused(POD, changed(**edit))
    assert messages and all("dbworker operator" in m or "integer" in m for m in messages), messages
    assert any(why in m for m in messages), messages
