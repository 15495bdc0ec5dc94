"""The emulator's additions to kmock behave like an API server where kopf and the operator rely on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.k8s.emulator import json_patch, matches_selector, merge_patch, running

DEPLOYMENTS = "/apis/apps/v1/namespaces/ns/deployments"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    with running() as emulator, httpx.Client(base_url=emulator.url, timeout=10) as client:
        yield client


def _watch(api: httpx.Client, path: str, rv: str) -> list[dict[str, Any]]:
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"}
    with api.stream("GET", path, params=params) as response:
        return [json.loads(line) for line in response.iter_lines() if line]


def test_server_sets_uid_versions_and_generation(api: httpx.Client) -> None:
    created = api.post(DEPLOYMENTS, json={"metadata": {"name": "a"}, "spec": {"replicas": 1}}).json()
    meta = created["metadata"]
    assert meta["uid"] and meta["generation"] == 1 and meta["creationTimestamp"]
    spec_change = api.patch(f"{DEPLOYMENTS}/a", json={"spec": {"replicas": 2}}, headers=MERGE).json()
    assert int(spec_change["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert spec_change["metadata"]["generation"] == 2
    status = api.patch(f"{DEPLOYMENTS}/a/status", json={"status": {"replicas": 2}, "spec": {"replicas": 9}},
                       headers=MERGE).json()
    assert status["metadata"]["generation"] == 2 and status["spec"]["replicas"] == 2  # status writes only status
    noop = api.patch(f"{DEPLOYMENTS}/a", json={"spec": {"replicas": 2}}, headers=MERGE).json()
    assert noop["metadata"]["resourceVersion"] == status["metadata"]["resourceVersion"]
    assert api.post(DEPLOYMENTS, json={"metadata": {"name": "a"}}).status_code == 409


def test_watch_resumes_from_a_list_version_without_losing_events(api: httpx.Client) -> None:
    listed = api.get(DEPLOYMENTS).json()
    since = listed["metadata"]["resourceVersion"]
    api.post(DEPLOYMENTS, json={"metadata": {"name": "b"}, "spec": {"replicas": 1}})  # between list and watch
    api.delete(f"{DEPLOYMENTS}/b")
    events = _watch(api, DEPLOYMENTS, since)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("DELETED", "b")]
    assert _watch(api, DEPLOYMENTS, str(events[-1]["object"]["metadata"]["resourceVersion"])) == []


def test_deleting_an_owner_collects_what_it_owns(api: httpx.Client) -> None:
    owner = api.post("/apis/dbworker.dev/v1alpha1/namespaces/ns/workers", json={"metadata": {"name": "w"}}).json()
    ref = {"apiVersion": "dbworker.dev/v1alpha1", "kind": "Worker", "name": "w", "uid": owner["metadata"]["uid"]}
    api.post(DEPLOYMENTS, json={"metadata": {"name": "owned", "ownerReferences": [ref]}})
    api.delete("/apis/dbworker.dev/v1alpha1/namespaces/ns/workers/w")
    assert api.get(f"{DEPLOYMENTS}/owned").status_code == 404


def test_discovery_serves_the_custom_resource(api: httpx.Client) -> None:
    resources = api.get("/apis/dbworker.dev/v1alpha1").json()["resources"]
    names = {r["name"]: r for r in resources}
    assert names["workers"]["kind"] == "Worker" and names["workers"]["namespaced"] is True
    assert {"workers/status", "workers/scale"} <= set(names)
    assert api.get("/apis/keda.sh/v1alpha1").status_code == 404  # not installed here


def test_patch_helpers() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}
    assert json_patch({"a": [1, 2]}, [{"op": "add", "path": "/a/-", "value": 3},
                                      {"op": "replace", "path": "/b", "value": 1}]) == {"a": [1, 2, 3], "b": 1}
    assert matches_selector({"a": "1", "b": "2"}, "a=1,b")
    assert not matches_selector({"a": "1"}, "a!=1")
    assert matches_selector({"a": "1"}, "!c")
