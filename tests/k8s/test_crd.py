"""The Worker CRD: structural, rejects bad Workers (JSON Schema + CEL rules), committed YAML current."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dbworker_operator import crd, generate, install

from tests.k8s import samples

pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules")
from tests.k8s.apiserver_rules import SCHEMA, check
from tests.k8s.apiserver_rules import (
    cel_violations as cel_violations,  # re-exported: tests/chart imports it here
)

ROOT = Path(__file__).resolve().parents[2]


def _walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")


def test_schema_is_structural() -> None:
    """Every node has a type (or is int-or-string / preserves unknown fields); no mixed maps."""
    for path, node in _walk(SCHEMA):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), f"{path} mixes both"
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        for rule in node.get("x-kubernetes-validations") or []:
            assert rule["rule"] and rule["message"], path


def test_crd_manifest_is_valid_and_has_subresources_and_columns() -> None:
    manifest = crd.worker_crd()
    kubernetes_validate.validate(manifest, "1.33", strict=True)
    version = manifest["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:3] == ["Ready", "Desired", "Backlog"] and columns[-1] == "Age"
    assert manifest["spec"]["names"]["shortNames"] == ["dbw"]


def test_good_workers_pass() -> None:
    assert check(samples.minimal()) == []
    assert check(samples.full()) == []
    assert check(samples.scale_to_zero()) == [] and check(samples.scale_to_zero(kind="mysql")) == []
    percent = samples.with_spec(samples.minimal(), disruptionBudget={"minAvailable": "50%"})
    assert check(percent) == []


def _bad(**changes: Any) -> dict[str, Any]:
    return samples.with_spec(samples.full(), **changes)


def _named(name: str) -> dict[str, Any]:
    return samples.minimal(name)


def _without_secret_ref() -> dict[str, Any]:
    body = samples.minimal()
    body["spec"]["database"] = {"envName": "DATABASE_URL"}
    return body


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no database", samples.with_spec(samples.minimal(), database=None), "'database' is a required property"),
    ("no secret ref", _without_secret_ref(), "'urlSecretRef' is a required property"),
    ("app not MODULE:ATTR", _bad(app="imgdedup.jobs"), "does not match"),
    ("app with spaces", _bad(app="a b:c"), "does not match"),
    ("negative replicas", _bad(replicas=-1), "less than the minimum of 0"),
    ("zero concurrency", _bad(concurrency={"hash": 0}), "less than the minimum of 1"),
    ("bad worker name", _bad(workers=["Hash"]), "does not match"),
    ("negative drain", _bad(drainSeconds=-5), "less than the minimum of 0"),
    ("zero poll", _bad(pollSeconds=0), "less than or equal to the minimum of 0"),
    ("bad pull policy", _bad(imagePullPolicy="Sometimes"), "is not one of"),
    ("port too big", _bad(metrics={"port": 70000}), "greater than the maximum"),
    ("string replicas", _bad(replicas="3"), "is not of type 'integer'"),
    ("min > max replicas", _bad(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
     "autoscaling.minReplicas must be <= autoscaling.maxReplicas"),
    ("autoscaling to zero without the database trigger", _bad(autoscaling={"minReplicas": 0, "maxReplicas": 2}),
     "minReplicas 0 needs autoscaling.database"),
    ("a database trigger of another kind", _bad(autoscaling={"maxReplicas": 2, "database": {
        "type": "sqlite", "connectionKey": "k", "sources": [{"worker": "a", "table": "t"}]}}), "sqlite"),
    ("a source table that is not a plain name", _bad(autoscaling={"maxReplicas": 2, "database": {
        "type": "postgresql", "connectionKey": "k", "sources": [{"worker": "a", "table": "x; drop"}]}}),
     "does not match"),
    ("no connection budget", _bad(database={"urlSecretRef": {"name": "a", "key": "b"}, "maxConnections": 0}),
     "less than the minimum of 1"),
    ("max poll < poll", _bad(pollSeconds=5, maxPollSeconds=1), "maxPollSeconds must be >= pollSeconds"),
    ("poll above default max", _bad(maxPollSeconds=None, pollSeconds=20), "maxPollSeconds must be >= pollSeconds"),
    ("concurrency outside workers", _bad(concurrency={"resize": 2}), "every concurrency key must be listed"),
    ("both budgets", _bad(disruptionBudget={"minAvailable": 1, "maxUnavailable": 1}), "exactly one of"),
    ("no budget value", _bad(disruptionBudget={}), "exactly one of"),
    ("budget word", _bad(disruptionBudget={"minAvailable": "half"}), "non-negative count or a whole percentage"),
    ("budget not a number", _bad(disruptionBudget={"minAvailable": "abc%"}), "whole percentage from 0% to 100%"),
    ("budget over 100%", _bad(disruptionBudget={"maxUnavailable": "150%"}), "whole percentage from 0% to 100%"),
    ("budget fraction", _bad(disruptionBudget={"maxUnavailable": "12.5%"}), "whole percentage from 0% to 100%"),
    ("name too long", _named("w" * 64), "metadata.name: '" + "w" * 64 + "' is too long"),
    ("name with a dot", _named("img.dedup"), "a Worker's name must be a DNS label"),
    ("root user", _bad(podSecurityContext={"runAsUser": 0}), "less than the minimum of 1"),
    ("unconfined seccomp", _bad(podSecurityContext={"seccompProfile": {"type": "Unconfined"}}), "is not one of"),
    ("localhost seccomp without a file", _bad(containerSecurityContext={"seccompProfile": {"type": "Localhost"}}),
     "localhostProfile is required with type Localhost"),
    ("tmp size not a quantity", _bad(tmpSizeLimit="lots"), "does not match"),
    ("bad pod monitor label", _bad(metrics={"podMonitor": True, "podMonitorLabels": {"release": "not valid!"}}),
     "does not match"),
    ("reserved pod label", _bad(podLabels={"app.kubernetes.io/instance": "x"}), "podLabels may not set"),
]


@pytest.mark.parametrize(("case", "body", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_workers_are_rejected_with_a_useful_message(case: str, body: dict[str, Any], expected: str) -> None:
    problems = check(body)
    assert any(expected in p for p in problems), f"{case}: {problems}"


def test_cel_rules_accept_their_edges() -> None:
    edges = [
        _bad(autoscaling={"minReplicas": 3, "maxReplicas": 3}),
        _bad(pollSeconds=2, maxPollSeconds=2),
        _bad(workers=None, concurrency={"anything": 2}),  # no workers list: every worker runs
        _bad(disruptionBudget={"maxUnavailable": 0}),
        _bad(disruptionBudget={"maxUnavailable": "100%"}),
        _bad(disruptionBudget={"minAvailable": "0%"}),
        _named("w" * 63),
        _named("0-starts-with-a-digit"),
        _bad(podSecurityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}),
        _bad(tmpSizeLimit=1073741824),
    ]
    for body in edges:
        assert check(body) == [], body["spec"]


def test_committed_generated_files_are_current() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in generate.generated_files(ROOT).items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"regenerate with `make crd` (python -m dbworker_operator.generate --write): {stale}"


def test_write_cli_writes_every_generated_file(tmp_path: Path) -> None:
    assert generate.main(["--write", "--root", str(tmp_path)]) == 0
    for path, text in generate.generated_files(tmp_path).items():
        assert path.read_text() == text
    crds = list(yaml.safe_load_all((tmp_path / "operator/manifests/peering-crds.yaml").read_text()))
    assert {c["spec"]["names"]["kind"] for c in crds} == {"KopfPeering", "ClusterKopfPeering"}
    groups = yaml.safe_load((tmp_path / "charts/dbworker-operator/files/rbac-rules.yaml").read_text())
    assert set(groups) == {"common", "clusterPeering", "namespacedPeering", "deletionCost", "secrets"}
    for rules in groups.values():
        assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in rules)
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"},
                "rules": copy.deepcopy(rules)}
        kubernetes_validate.validate(role, "1.33", strict=True)


def _manifests() -> list[dict[str, Any]]:
    return [doc for name in ("rbac.yaml", "deployment.yaml", "admission-policy.yaml")
            for doc in yaml.safe_load_all((ROOT / "operator/manifests" / name).read_text()) if doc]


def test_install_manifests_are_the_chart_and_use_the_generated_rules() -> None:
    """One set of facts: the raw manifests are the chart rendered with its defaults."""
    documents = _manifests()
    for doc in documents:
        if doc["kind"] == "ClusterKopfPeering":  # a kopf CRD kind: no schema to check against
            continue
        version = "1.30" if doc["kind"].startswith("ValidatingAdmissionPolicy") else "1.25"
        kubernetes_validate.validate(doc, version, strict=True)
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
        assert "helm.sh/chart" not in doc["metadata"].get("labels", {})
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    assert role["rules"] == install.rbac_rules(scope="cluster")
    assert not any(r["resources"] == ["secrets"] for r in role["rules"]), "no Secret is readable by default"
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert {"DBWORKER_OPERATOR_NAMESPACES", "DBWORKER_OPERATOR_PEERING", "DBWORKER_OPERATOR_LIVENESS_PORT",
            "DBWORKER_OPERATOR_METRICS_PORT", "DBWORKER_OPERATOR_SECRET_NAMESPACES"} <= env
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    namespace = next(d for d in documents if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    policy = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == \
        "request.userInfo.username == 'system:serviceaccount:dbworker-system:dbworker-operator'"
