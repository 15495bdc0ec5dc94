"""The chart rendered by Helm's own engine: defaults and every option, strict lint, the
values schema rejecting bad input by key, and every manifest against Kubernetes schemas
(built-in kinds via kubernetes-validate; Worker and kopf peering objects via the CRDs the
chart ships). ServiceMonitor has no schema here (no Prometheus Operator CRD is shipped);
its shape is checked by hand and the PrometheusRule's rules by promtool in test_rules.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from dbworker_operator import install

from tests.chart.conftest import (
    ALL_ON,
    CHART,
    NAMESPACE,
    RELEASE,
    RULES,
    all_on,
    by_kind,
    crd_schemas,
    notes,
    objects,
    render,
)

KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
# Kinds only a CRD defines: checked against the chart's crds/ or, failing that, by hand.
CRD_KINDS = {"Worker", "KopfPeering", "ClusterKopfPeering", "ServiceMonitor", "PrometheusRule"}
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


# --- rendering ---------------------------------------------------------------------------


def test_defaults_render_the_operator_with_cluster_rbac(chart: helm.Chart) -> None:
    objs = objects(chart)
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        ["ClusterKopfPeering", "ClusterRole", "ClusterRoleBinding", "Deployment", "Pod", "Service", "ServiceAccount",
         # The offline render's Kubernetes (Helm's own) serves admissionregistration.k8s.io/v1 policies.
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )
    [deployment] = by_kind(objs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "dbworker_operator"]
    assert env_of(deployment) == {
        "DBWORKER_OPERATOR_NAMESPACES": "",
        "DBWORKER_OPERATOR_LIVENESS_PORT": "8080",
        "DBWORKER_OPERATOR_METRICS_PORT": "9090",
        "DBWORKER_OPERATOR_PEERING": f"{RELEASE}-dbworker-operator",
        "DBWORKER_OPERATOR_LOG_LEVEL": "INFO",
        "DBWORKER_OPERATOR_SECRET_NAMESPACES": "",
        "DBWORKER_OPERATOR_DELETION_COST": "true",
        "POD_NAME": "",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"healthz": 8080, "metrics": 9090}
    assert container["image"] == f"ghcr.io/dbworker/dbworker-operator:{chart.metadata['appVersion']}"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_operator_accepts_the_environment_the_chart_sets(chart: helm.Chart, values: dict[str, Any] | None) -> None:
    """The operator's own config parser reads the rendered env (the contract, both sides)."""
    config = pytest.importorskip("dbworker_operator.config")
    [deployment] = by_kind(objects(chart, values), "Deployment")
    env = env_of(deployment)
    parsed = config.from_env(env)
    assert parsed.liveness_port == 8080 and parsed.metrics_port == 9090
    assert parsed.peering == f"{RELEASE}-dbworker-operator"
    if values is None:
        assert parsed.clusterwide
    else:
        assert parsed.namespaces == ("shop", NAMESPACE)
        assert parsed.priority == 100
        assert parsed.log_level == "DEBUG"


def test_the_image_can_be_named_by_digest(chart: helm.Chart) -> None:
    digest = "sha256:" + "a" * 64
    [deployment] = by_kind(objects(chart, {"image": {"repository": "r.example/op", "digest": digest}}), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"r.example/op@{digest}"


def test_container_is_hardened(chart: helm.Chart) -> None:
    [deployment] = by_kind(objects(chart), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # A read-only root still needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in pod["containers"][0]["volumeMounts"]


def test_every_object_carries_the_standard_labels(chart: helm.Chart) -> None:
    for obj in objects(chart, all_on()):
        labels = obj["metadata"].get("labels", {})
        missing = [k for k in STANDARD_LABELS if k not in labels]
        assert not missing, f"{obj['kind']}/{obj['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_every_option_on_renders_each_optional_object(chart: helm.Chart) -> None:
    objs = objects(chart, all_on())
    count = {kind: len(by_kind(objs, kind)) for kind in {o["kind"] for o in objs}}
    assert count == {
        "Deployment": 1,
        "ServiceAccount": 1,
        "Service": 1,
        "Role": 3,  # the operator's in shop and ops, the Secret reader's in shop
        "RoleBinding": 3,
        "ClusterRole": 1,  # cluster-scoped rules only (CRD and namespace discovery)
        "ClusterRoleBinding": 1,
        "ValidatingAdmissionPolicy": 1,
        "ValidatingAdmissionPolicyBinding": 1,
        "NetworkPolicy": 3,  # the operator's own, and one per namespace of Workers
        "KopfPeering": 2,
        "ServiceMonitor": 1,
        "PrometheusRule": 1,
        "ConfigMap": 2,
        "Worker": 2,
        "Ingress": 1,  # to the shop Worker's console
        "Pod": 1,
    }
    [deployment] = by_kind(objs, "Deployment")
    env = env_of(deployment)
    assert env["DBWORKER_OPERATOR_NAMESPACES"] == f"shop,{NAMESPACE}"
    assert env["DBWORKER_OPERATOR_PRIORITY"] == "100"
    assert env["DBWORKER_OPERATOR_LOG_LEVEL"] == "DEBUG"
    assert env["TZ"] == "UTC"
    assert env["DBWORKER_OPERATOR_SECRET_NAMESPACES"] == "shop"
    assert env["DBWORKER_OPERATOR_POD_MONITOR_LABELS"] == "release=kube-prometheus-stack,team=payments"
    assert deployment["spec"]["replicas"] == 1
    [monitor] = by_kind(objs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    [rule] = by_kind(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_pod_labels_never_override_the_selector(chart: helm.Chart) -> None:
    values = all_on()
    values["podLabels"] = {"app.kubernetes.io/name": "other", "app.kubernetes.io/component": "x"}
    [deployment] = by_kind(objects(chart, values), "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert {k: labels[k] for k in selector} == selector


def test_service_and_service_monitor_reach_the_operator_pods(chart: helm.Chart) -> None:
    objs = objects(chart, all_on())
    [deployment] = by_kind(objs, "Deployment")
    [service] = by_kind(objs, "Service")
    [monitor] = by_kind(objs, "ServiceMonitor")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in port_names
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}


def test_helm_test_pod_checks_healthz_through_the_service(chart: helm.Chart) -> None:
    objs = objects(chart)
    [pod] = by_kind(objs, "Pod")
    [service] = by_kind(objs, "Service")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    assert f"http://{service['metadata']['name']}.{NAMESPACE}.svc:8080/healthz" in script
    assert 8080 in [p["port"] for p in service["spec"]["ports"]]
    # The Service must not route operator traffic to the test pod.
    assert not service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    compile(script, "healthz-check", "exec")


def _operator_roles(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in by_kind(objs, "Role") if not r["metadata"]["name"].endswith("-secrets")]


def test_namespaced_scope_splits_cluster_scoped_rules_out(chart: helm.Chart) -> None:
    generated = install.rbac_rules(scope="namespaced")
    objs = objects(chart, all_on())
    roles = _operator_roles(objs)
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(["shop", NAMESPACE])
    [cluster_role] = by_kind(objs, "ClusterRole")
    namespaced = {(g, r) for rule in roles[0]["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    clustered = {(g, r) for rule in cluster_role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    everything = {(g, r) for rule in generated for g in rule["apiGroups"] for r in rule["resources"]}
    assert namespaced | clustered == everything
    assert not namespaced & clustered
    assert ("apiextensions.k8s.io", "customresourcedefinitions") in clustered
    assert ("", "namespaces") in clustered and ("kopf.dev", "kopfpeerings") in namespaced
    assert ("kopf.dev", "clusterkopfpeerings") not in namespaced | clustered
    assert ("dbworker.dev", "workers") in namespaced
    assert ("", "secrets") not in namespaced | clustered, "Secrets only through the secretChecks Roles"
    for binding in by_kind(objs, "RoleBinding") + by_kind(objs, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"{RELEASE}-dbworker-operator", "namespace": NAMESPACE}
        ]


def test_cluster_scope_grants_the_generated_rules_unchanged(chart: helm.Chart) -> None:
    [cluster_role] = by_kind(objects(chart), "ClusterRole")
    assert cluster_role["rules"] == install.rbac_rules(scope="cluster")
    [narrow] = by_kind(objects(chart, {"deletionCost": {"enabled": False}}), "ClusterRole")
    assert narrow["rules"] == install.rbac_rules(scope="cluster", deletion_cost=False)
    assert not any("patch" in r["verbs"] for r in narrow["rules"] if r["resources"] == ["pods"])


def test_secrets_are_readable_only_in_the_namespaces_listed(chart: helm.Chart) -> None:
    """Default: no Secret anywhere. Listed namespaces: a Role each, and the operator is told."""
    assert not [o for o in objects(chart) for r in o.get("rules", []) if "secrets" in r["resources"]]
    objs = objects(chart, {"secretChecks": {"namespaces": ["shop", "media"]}})
    readers = [r for r in by_kind(objs, "Role") if r["metadata"]["name"].endswith("-secrets")]
    assert sorted(r["metadata"]["namespace"] for r in readers) == ["media", "shop"]
    assert all(r["rules"] == install.rule_groups()["secrets"] for r in readers)
    assert not any("secrets" in r["resources"] for r in by_kind(objs, "ClusterRole")[0]["rules"])
    bindings = [b for b in by_kind(objs, "RoleBinding") if b["metadata"]["name"].endswith("-secrets")]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["media", "shop"]
    [deployment] = by_kind(objs, "Deployment")
    assert env_of(deployment)["DBWORKER_OPERATOR_SECRET_NAMESPACES"] == "shop,media"
    values = {"watch": {"scope": "namespaced", "namespaces": ["shop"]}, "secretChecks": {"namespaces": ["media"]}}
    with pytest.raises(helm.HelmError, match=r"secretChecks.namespaces: \"media\" is not watched"):
        render(chart, values)


def test_the_admission_policy_binds_the_operators_service_account(chart: helm.Chart) -> None:
    objs = objects(chart)
    [policy] = by_kind(objs, "ValidatingAdmissionPolicy")
    [binding] = by_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
    [condition] = policy["spec"]["matchConditions"]
    user = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-dbworker-operator"
    assert condition["expression"] == f"request.userInfo.username == '{user}'"
    assert policy["spec"]["validations"] == install.pod_patch_policy()["validations"]
    for values in ({"admissionPolicy": {"create": False}}, {"deletionCost": {"enabled": False}}):
        assert not by_kind(objects(chart, values), "ValidatingAdmissionPolicy"), values
    assert by_kind(objects(chart, {"admissionPolicy": {"create": True}}), "ValidatingAdmissionPolicy")


def test_network_policies_let_exactly_the_operator_scrape_the_workers(chart: helm.Chart) -> None:
    objs = objects(chart, all_on())
    [deployment] = by_kind(objs, "Deployment")
    operator_labels = deployment["spec"]["template"]["metadata"]["labels"]
    [own] = [p for p in by_kind(objs, "NetworkPolicy") if p["metadata"]["name"] == f"{RELEASE}-dbworker-operator"]
    assert own["spec"]["podSelector"]["matchLabels"].items() <= operator_labels.items()
    assert own["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 9090}, {"protocol": "TCP", "port": 8080}]}]
    policies = [p for p in by_kind(objs, "NetworkPolicy") if p is not own]
    assert sorted(p["metadata"]["namespace"] for p in policies) == sorted(["shop", NAMESPACE])  # watched ones
    for policy in policies:
        spec_ = policy["spec"]
        assert spec_["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "dbworker",
                                                       "app.kubernetes.io/managed-by": "dbworker-operator"}
        assert spec_["policyTypes"] == ["Ingress"]
        [rule] = spec_["ingress"]
        [peer] = rule["from"]
        assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
        assert peer["podSelector"]["matchLabels"].items() <= operator_labels.items()
        assert rule["ports"] == [{"protocol": "TCP", "port": 9100}]
    with pytest.raises(helm.HelmError, match=r"networkPolicy\.namespaces: list the namespaces"):
        render(chart, {"networkPolicy": {"enabled": True}})


def test_namespaced_scope_defaults_to_the_release_namespace(chart: helm.Chart) -> None:
    objs = objects(chart, {"watch": {"scope": "namespaced"}})
    [deployment] = by_kind(objs, "Deployment")
    assert env_of(deployment)["DBWORKER_OPERATOR_NAMESPACES"] == NAMESPACE
    assert [r["metadata"]["namespace"] for r in by_kind(objs, "Role")] == [NAMESPACE]
    assert [p["metadata"]["namespace"] for p in by_kind(objs, "KopfPeering")] == [NAMESPACE]


def test_rbac_and_service_account_and_peering_can_be_left_to_the_admin(chart: helm.Chart) -> None:
    values = {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops-sa"},
              "peering": {"create": False}, "admissionPolicy": {"create": False}}
    objs = objects(chart, values)
    assert sorted(o["kind"] for o in objs) == ["Deployment", "Pod", "Service"]
    [deployment] = by_kind(objs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"


def test_existing_service_account_must_be_named(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match=r"serviceAccount\.name"):
        render(chart, {"serviceAccount": {"create": False}})


def test_several_replicas_need_random_peering_priorities(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match=r"peering\.priority: with replicaCount > 1 leave it null"):
        render(chart, {"replicaCount": 2, "peering": {"priority": 10}})
    [deployment] = by_kind(objects(chart, {"replicaCount": 2}), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert "DBWORKER_OPERATOR_PRIORITY" not in env_of(deployment)


def test_worker_in_an_unwatched_namespace_is_refused(chart: helm.Chart) -> None:
    values = {"watch": {"scope": "namespaced", "namespaces": ["shop"]}, "workers": [ALL_ON["workers"][1]]}
    with pytest.raises(helm.HelmError, match=r"workers\[0\]\.namespace: \"ops\" is not watched"):
        render(chart, values)


def test_workers_become_worker_objects_with_their_spec(chart: helm.Chart) -> None:
    workers = by_kind(objects(chart, all_on()), "Worker")
    assert [(w["metadata"]["namespace"], w["metadata"]["name"]) for w in workers] == [("shop", "shop"), (NAMESPACE, "mail")]
    assert workers[0]["apiVersion"] == "dbworker.dev/v1alpha1"
    assert workers[0]["spec"] == ALL_ON["workers"][0]["spec"]
    assert workers[0]["metadata"]["labels"]["tier"] == "batch"


def test_no_crd_in_templates_so_skip_crds_and_preinstalled_crds_work(chart: helm.Chart) -> None:
    # CRDs live only in crds/ (installed once, skipped by --skip-crds); a template rendering
    # one would fight a CRD that is already installed.
    assert not by_kind(objects(chart, all_on()), "CustomResourceDefinition")
    shipped = {
        doc["metadata"]["name"] for c in chart.crds for doc in yaml.safe_load_all(c["data"]) if doc
    }
    assert {"workers.dbworker.dev", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"} <= shipped


def test_dashboards_and_rules_are_the_repository_files(chart: helm.Chart) -> None:
    objs = objects(chart, all_on())
    config_maps = by_kind(objs, "ConfigMap")
    shipped = {key: text for cm in config_maps for key, text in cm["data"].items()}
    on_disk = {p.name: p.read_text() for p in (CHART / "dashboards").glob("*.json")}
    assert {k: json.loads(v) for k, v in shipped.items()} == {k: json.loads(v) for k, v in on_disk.items()}
    for cm in config_maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "dbworker"}

    [rule] = by_kind(objs, "PrometheusRule")
    source = yaml.safe_load(RULES.read_text())
    for group, src_group in zip(rule["spec"]["groups"], source["groups"], strict=True):
        for got, src in zip(group["rules"], src_group["rules"], strict=True):
            assert got["expr"] == src["expr"] and got["for"] == src["for"]
            assert got["labels"] == {**src["labels"], "team": "payments"}
            assert got["annotations"]["runbook_url"] == (
                f"https://docs.example.com/dbworker/runbooks/{src['alert']}.md"
            )
            assert {k: v for k, v in got["annotations"].items() if k != "runbook_url"} == {
                k: v for k, v in src["annotations"].items() if k != "runbook_url"
            }


def test_notes_say_what_to_apply_next(chart: helm.Chart) -> None:
    text = notes(chart)
    assert "kind: Worker" in text and "urlSecretRef" in text and f"helm test {RELEASE}" in text
    assert "reads no Secret" in text and "only the pod-deletion-cost annotation" in text
    text = notes(chart, all_on())
    assert "shop/shop" in text and f"{NAMESPACE}/mail" in text
    assert "may read Secrets in: shop" in text
    assert "never changes a pod" in notes(chart, {"deletionCost": {"enabled": False}})


# --- lint and schema -------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_every_pod_passes_the_restricted_pod_security_standard(chart: helm.Chart, values: dict[str, Any] | None) -> None:
    from tests.k8s import restricted

    pods = list(restricted.pod_specs(objects(chart, values)))
    assert {name.split("/")[0] for name, _ in pods} == {"Deployment", "Pod"}
    for name, pod in pods:
        assert restricted.violations(pod) == [], name


@pytest.mark.parametrize("kube_version", [None, "v1.25.0", "v1.29.0"], ids=["helm", "1.25", "1.29"])
@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_lint_strict_passes(values: dict[str, Any] | None, kube_version: str | None) -> None:
    """Strict, for the oldest Kubernetes Chart.yaml admits and one without admission policies."""
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=kube_version)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize(
    ("values", "key", "why"),
    [
        ({"replicaCount": "two"}, "/replicaCount", "got string, want integer"),
        ({"replicaCount": -1}, "/replicaCount", "minimum"),
        ({"replicaCont": 1}, "''", "'replicaCont' not allowed"),
        ({"image": {"repository": "x", "tagg": "1"}}, "/image", "'tagg' not allowed"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "/image/pullPolicy", "must be one of"),
        ({"watch": {"scope": "everywhere"}}, "/watch/scope", "must be one of"),
        ({"watch": {"scope": "cluster", "namespaces": ["shop"]}}, "/watch/namespaces", "maxItems"),
        ({"watch": {"scope": "namespaced", "namespaces": ["Shop_1"]}}, "/watch/namespaces/0", "does not match pattern"),
        ({"ports": {"liveness": 0, "metrics": 9090}}, "/ports/liveness", "minimum"),
        ({"ports": {"liveness": 8080, "metrics": 70000}}, "/ports/metrics", "maximum"),
        ({"logLevel": "LOUD"}, "/logLevel", "must be one of"),
        ({"logLevel": "CRITICAL"}, "/logLevel", "must be one of"),
        ({"peering": {"priority": 2**31}}, "/peering/priority", "maximum"),
        ({"peering": {"priority": "high"}}, "/peering/priority", "want null or integer"),
        ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled", "want boolean"),
        ({"serviceMonitor": {"interval": "30 seconds"}}, "/serviceMonitor/interval", "does not match pattern"),
        ({"prometheusRule": {"runbookBaseUrl": "docs/runbooks"}}, "/prometheusRule/runbookBaseUrl", "does not match pattern"),
        ({"dashboards": {"labels": {"grafana_dashboard": 1}}}, "/dashboards/labels/grafana_dashboard", "want string"),
        ({"workers": {"name": "a"}}, "/workers", "want array"),
        ({"workers": [{"name": "Bad_Name", "spec": {}}]}, "/workers/0/name", "does not match pattern"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "m:c"}}]}, "/workers/0/spec", "missing property 'database'"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "no-colon", "database": {"urlSecretRef": {"name": "s", "key": "k"}}}}]}, "/workers/0/spec/app", "does not match pattern"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "m:c", "replica": 2, "database": {"urlSecretRef": {"name": "s", "key": "k"}}}}]}, "/workers/0/spec", "'replica' not allowed"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "m:c", "concurrency": {"a": 0}, "database": {"urlSecretRef": {"name": "s", "key": "k"}}}}]}, "/workers/0/spec/concurrency/a", "minimum"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "m:c", "database": {"urlSecretRef": {"name": "s", "key": "k"}, "maxConnections": 0}}}]}, "/workers/0/spec/database/maxConnections", "minimum"),
        ({"workers": [{"name": "a", "spec": {"image": "x", "app": "m:c", "database": {"urlSecretRef": {"name": "s", "key": "k"}, "transactionPooler": "yes"}}}]}, "/workers/0/spec/database/transactionPooler", "want boolean"),
    ],
)
def test_schema_rejects_bad_values_naming_the_key(chart: helm.Chart, values: dict[str, Any], key: str, why: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        render(chart, values)
    message = str(caught.value)
    assert f"at {key}" in message or f"at '{key}'" in message, message
    assert why in message, message


def test_values_yaml_is_valid_and_documented_line_by_line() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    # Kubernetes objects passed through whole need no comment per field.
    passthrough = {"resources", "podSecurityContext", "securityContext", "labels", "requests", "limits",
                   "capabilities", "seccompProfile", "drop"}
    lines = (CHART / "values.yaml").read_text().splitlines()
    parents: list[tuple[int, str]] = []
    for n, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z_][\w.]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        parents = [(i, k) for i, k in parents if i < indent]
        if not any(k in passthrough for _, k in parents):
            above = next((lines[j].strip() for j in range(n - 1, -1, -1) if lines[j].strip()), "")
            header = line.rstrip().endswith(":")
            assert above.startswith("#") or header, f"values.yaml line {n + 1} ({key}) has no comment above it"
        parents.append((indent, key))


def test_schema_worker_spec_matches_the_crd() -> None:
    """The values schema's Worker spec lists exactly the CRD's fields (a stale copy fails here)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values_spec = schema["properties"]["workers"]["items"]["properties"]["spec"]
    crd_spec = crd_schemas()[("dbworker.dev/v1alpha1", "Worker")]["properties"]["spec"]
    assert sorted(values_spec["properties"]) == sorted(crd_spec["properties"])
    assert sorted(values_spec["required"]) == sorted(crd_spec.get("required", []))
    # The database block is spelt out field by field: the pooler settings and the connection budget.
    assert sorted(values_spec["properties"]["database"]["properties"]) == \
        sorted(crd_spec["properties"]["database"]["properties"])
    described = values_spec["properties"]["autoscaling"]["description"]
    assert all(name in described for name in crd_spec["properties"]["autoscaling"]["properties"]), described


# --- Kubernetes schemas ----------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_builtin_kinds_pass_kubernetes_validate(chart: helm.Chart, values: dict[str, Any] | None, kube_version: str) -> None:
    checked = 0
    for obj in objects(chart, values):
        if obj["kind"] in CRD_KINDS:
            continue
        if obj["kind"].startswith("ValidatingAdmissionPolicy") and kube_version < "1.30":
            # admissionregistration.k8s.io/v1 policies exist from 1.30; "auto" renders them only there.
            continue
        kubernetes_validate.validate(obj, kube_version, strict=True)
        checked += 1
    assert checked >= 6


def _without_cel(schema: Any) -> Any:
    """The CRD schema minus Kubernetes-only keywords jsonschema does not know (CEL rules are
    the API server's to run; they are not checked here)."""
    if isinstance(schema, dict):
        return {k: _without_cel(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_without_cel(v) for v in schema]
    return schema


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_crd_kinds_pass_the_shipped_crd_schemas(chart: helm.Chart, values: dict[str, Any] | None) -> None:
    schemas = crd_schemas()
    checked = set()
    for obj in objects(chart, values):
        key = (obj["apiVersion"], obj["kind"])
        if obj["kind"] not in CRD_KINDS:
            continue
        if key not in schemas:
            # ServiceMonitor and PrometheusRule: the Prometheus Operator's CRDs are not shipped.
            assert obj["kind"] in {"ServiceMonitor", "PrometheusRule"}, key
            continue
        # OpenAPI v3 schemas use draft-4 keywords (boolean exclusiveMinimum).
        jsonschema.Draft4Validator(_without_cel(schemas[key])).validate(obj)
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}, KUBE_VERSIONS[-1], strict=True)
        checked.add(obj["kind"])
    assert checked == ({"ClusterKopfPeering"} if values is None else {"KopfPeering", "Worker"})


def test_crd_schema_catches_a_bad_worker(chart: helm.Chart) -> None:
    """The check above has teeth: a Worker the API server would refuse fails it."""
    schema = _without_cel(crd_schemas()[("dbworker.dev/v1alpha1", "Worker")])
    [worker, _] = by_kind(objects(chart, all_on()), "Worker")
    worker["spec"]["replicas"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate(worker)


def test_rendered_workers_pass_the_crd_cel_rules(chart: helm.Chart) -> None:
    """The API server also runs the CRD's CEL rules; so does the operator's own CRD test helper."""
    pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules")
    from tests.k8s.test_crd import cel_violations

    schema = crd_schemas()[("dbworker.dev/v1alpha1", "Worker")]
    workers = by_kind(objects(chart, all_on()), "Worker")
    assert workers
    for worker in workers:
        assert cel_violations(schema, worker) == [], worker["metadata"]["name"]
    # With teeth: a concurrency key outside `workers` is refused.
    bad = all_on()
    bad["workers"][0]["spec"]["concurrency"] = {"elsewhere": 2}
    [worker, _] = by_kind(objects(chart, bad), "Worker")
    assert cel_violations(schema, worker)


def test_packaged_chart_renders_the_same(chart: helm.Chart, tmp_path: Any) -> None:
    """`helm package` keeps what the templates read (dashboards/, rules/, files/, crds/)."""
    archive = helm.package(CHART, destination=tmp_path)
    with helm.Chart.load(archive) as packaged:
        assert render(packaged, all_on()) == render(chart, all_on())
        assert len(packaged.crds) == len(chart.crds)
