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
    assert [d["metadata"]["name"] for d in workers()] == ["imagededup-hash", "imagededup-compare", "imagededup-digest"]
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
    secrets = {
        d["metadata"]["name"]: set(d.get("stringData", {})) | set(d.get("data", {}))
        for d in documents() if d["kind"] == "Secret"
    }  # fmt: skip
    refs = [w["spec"]["database"]["urlSecretRef"] for w in workers()]
    refs += [w["spec"]["console"]["tokenSecretRef"] for w in workers() if w["spec"].get("console", {}).get("enabled")]
    for _, pod in _pods():
        for container in pod["containers"]:
            refs += [e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])
                     if "secretKeyRef" in e.get("valueFrom", {})]
        refs += [{"name": v["secret"]["secretName"], "key": item["key"]}
                 for v in pod.get("volumes", []) if "secret" in v for item in v["secret"].get("items", [])]
    assert refs and all(ref["key"] in secrets.get(ref["name"], set()) for ref in refs), (refs, secrets)


@pytest.mark.parametrize("worker", workers(), ids=lambda d: str(d["metadata"]["name"]))
def test_the_operator_builds_a_valid_deployment(worker: dict[str, Any]) -> None:
    spec_module = pytest.importorskip("dbworker_operator.spec")
    deployment = pytest.importorskip("dbworker_operator.builders.deployment")
    spec = spec_module.parse(worker)
    built = deployment.build(spec, replicas=worker["spec"].get("replicas", 1))
    kubernetes_validate.validate(built, kubernetes_validate.latest_version(), strict=True)
    (container,) = built["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["dbworker", "run", "examples.imagededup.app:coordinator"]


def test_the_image_never_holds_the_manifests() -> None:
    """deploy/ (its Secret included) is applied with kubectl, never copied into the image; the
    build context itself is checked in tests/k8s/test_image.py."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    sources = [word for line in re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, flags=re.MULTILINE)
               for word in line.split()]
    assert sources
    for source in sources:
        assert sorted(ROOT.glob(source)), f"Dockerfile copies {source}, which does not exist"
        assert not any(DEPLOY in (p, *p.parents) for p in ROOT.glob(source)), f"{source} copies deploy/"


def _pods() -> list[tuple[str, dict[str, Any]]]:
    from tests.k8s import restricted

    return list(restricted.pod_specs(documents()))


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    (namespace,) = (d for d in documents() if d["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"


@pytest.mark.parametrize(("name", "pod"), _pods(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_pod_passes_restricted_and_keeps_passwords_out_of_its_environment(name: str,
                                                                                pod: dict[str, Any]) -> None:
    from tests.k8s import restricted

    assert restricted.violations(pod) == [], name
    for container in [*pod["containers"], *pod.get("initContainers", [])]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        for env in container.get("env", []):
            assert not (env["name"].endswith("PASSWORD") and "value" in env), f"{name}: {env['name']} in plain text"
    assert pod.get("automountServiceAccountToken") is False, f"{name} mounts an API token it never uses"
    assert all(v.get("emptyDir", {}).get("sizeLimit") for v in pod.get("volumes", []) if "emptyDir" in v), name


def test_the_workers_pods_pass_restricted_too() -> None:
    """The operator builds the Worker pods; the namespace's enforce label must admit them."""
    spec_module = pytest.importorskip("dbworker_operator.spec")
    deployment = pytest.importorskip("dbworker_operator.builders.deployment")
    from tests.k8s import restricted

    for worker in workers():
        built = deployment.build(spec_module.parse(worker), replicas=1)
        assert restricted.violations(built["spec"]["template"]["spec"]) == [], worker["metadata"]["name"]


def test_a_network_policy_lets_the_operator_scrape_the_workers() -> None:
    """A default-deny namespace still lets the operator read port 9100 (backlog, deletion cost)."""
    policies = [d for d in documents() if d["kind"] == "NetworkPolicy"]
    assert any(p["spec"]["podSelector"] == {} and p["spec"]["policyTypes"] == ["Ingress"] and
               "ingress" not in p["spec"] for p in policies), "a default deny"
    ports = {w["spec"].get("metrics", {}).get("port", 9100) for w in workers()}
    scrape = [p for p in policies if p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
              == "dbworker"]
    assert scrape
    allowed = {port["port"] for p in scrape for rule in p["spec"]["ingress"] for port in rule["ports"]}
    peers = [peer for p in scrape for rule in p["spec"]["ingress"] for peer in rule["from"]]
    assert ports <= allowed
    assert any(peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") ==
               "dbworker-operator" for peer in peers)
