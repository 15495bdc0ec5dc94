"""The example's deploy/ folder holds up: Kubernetes objects valid, Workers match the CRD.

Standard kinds are checked with kubernetes-validate; `Worker` objects with jsonschema
against the CRD's openAPIV3Schema (the generated operator/manifests/crd.yaml), then run
through the operator's own parser and Deployment builder. No cluster is needed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "imagededup" / "deploy"
CRD = ROOT / "operator" / "manifests" / "crd.yaml"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def workers() -> list[dict[str, Any]]:
    return [doc for doc in documents() if doc["kind"] == "Worker"]


def validate_worker(worker: dict[str, Any]) -> None:
    # OpenAPI v3.0 schemas are draft-4 flavoured (`exclusiveMinimum: true` is a boolean).
    jsonschema.Draft4Validator(worker_schema()).validate(worker)


def worker_schema() -> dict[str, Any]:
    if not CRD.exists():
        pytest.skip(f"{CRD.relative_to(ROOT)} not generated yet (make crd)")
    crd = yaml.safe_load(CRD.read_text())
    (version,) = (v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return dict(version["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize(
    "doc",
    [d for d in documents() if d["kind"] != "Worker"],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_standard_objects_are_valid(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_there_are_the_objects_the_readme_promises() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents())
    assert ("Deployment", "imagededup-api") in kinds and ("Service", "imagededup-api") in kinds
    assert ("Secret", "imagededup-database") in kinds
    assert [d["metadata"]["name"] for d in workers()] == ["imagededup-hash", "imagededup-compare"]
    assert all(d["metadata"].get("namespace", "imagededup") == "imagededup" for d in documents())


@pytest.mark.parametrize("worker", workers(), ids=lambda d: str(d["metadata"]["name"]))
def test_workers_match_the_crd_schema(worker: dict[str, Any]) -> None:
    assert worker["apiVersion"] == "dbworker.dev/v1alpha1"
    validate_worker(worker)


def test_the_crd_schema_would_catch_a_broken_worker() -> None:
    broken = {**workers()[0], "spec": {**workers()[0]["spec"], "app": "not a module path"}}
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        validate_worker(broken)


def test_workers_name_what_the_application_registers() -> None:
    from examples.imagededup import app

    registered = set(app.coordinator.workers)
    assert {name for w in workers() for name in w["spec"]["workers"]} == registered
    for worker in workers():
        module, attr = worker["spec"]["app"].split(":")
        assert (module, attr) == ("examples.imagededup.app", "coordinator")
        assert set(worker["spec"].get("concurrency", {})) <= set(worker["spec"]["workers"])


def test_every_secret_reference_resolves() -> None:
    (secret,) = (d for d in documents() if d["kind"] == "Secret")
    keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    refs = [w["spec"]["database"]["urlSecretRef"] for w in workers()]
    api = next(
        d
        for d in documents()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "imagededup-api"
    )
    for container in api["spec"]["template"]["spec"]["containers"]:
        refs += [
            e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e
        ]
    assert refs and all(
        ref["name"] == secret["metadata"]["name"] and ref["key"] in keys for ref in refs
    )


@pytest.mark.parametrize("worker", workers(), ids=lambda d: str(d["metadata"]["name"]))
def test_the_operator_builds_a_valid_deployment(worker: dict[str, Any]) -> None:
    spec_module = pytest.importorskip("dbworker_operator.spec")
    deployment = pytest.importorskip("dbworker_operator.builders.deployment")
    spec = spec_module.parse(worker)
    built = deployment.build(spec, replicas=worker["spec"].get("replicas", 1))
    kubernetes_validate.validate(built, kubernetes_validate.latest_version(), strict=True)
    (container,) = built["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["dbworker", "run", "examples.imagededup.app:coordinator"]


def test_the_dockerfile_copies_what_exists() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    sources = re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, flags=re.MULTILINE)
    assert sources
    for line in sources:
        for source in line.split():
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
