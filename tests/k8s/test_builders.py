"""The pure builders: a parsed spec in, manifests out, each valid for a current Kubernetes."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from dbworker_operator import kinds, labels, spec
from dbworker_operator.builders import autoscaling, deployment, disruption, monitoring, owned

from tests.k8s import keda, restricted, samples

K8S_VERSION = "1.33"
# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest schema here.
OLDEST, NEWEST = "1.25", kubernetes_validate.latest_version()
ALL = kinds.Capabilities(keda=True, pod_monitors=True, server_version=(1, 33))


# Field names of the add-on kinds kubernetes-validate has no schema for (KEDA v2 ScaledObject,
# Prometheus Operator v1 PodMonitor), transcribed from their CRDs' documentation.
SCALED_OBJECT_SPEC = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod",
                      "idleReplicaCount", "fallback", "advanced", "triggers", "initialCooldownPeriod"}
KEDA_TRIGGER = {"type", "metadata", "metricType", "name", "authenticationRef", "useCachedMetrics"}
POD_MONITOR_SPEC = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels",
                    "sampleLimit", "targetLimit"}  # podTargetLabels: a list of pod label names
POD_METRICS_ENDPOINT = {"port", "portNumber", "path", "interval", "scrapeTimeout", "scheme", "relabelings"}


def _validate(manifest: dict[str, Any], version: str = K8S_VERSION) -> None:
    """kubernetes-validate for built-in kinds; for add-on kinds their metadata and selectors
    (embedded in built-in kinds) plus the documented field names."""
    if manifest["kind"] in ("ScaledObject", "TriggerAuthentication"):
        keda.validate(manifest, version)
        return
    if manifest["kind"] not in ("ScaledObject", "PodMonitor"):
        kubernetes_validate.validate(manifest, version, strict=True)
        return
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]}
    kubernetes_validate.validate(holder, version, strict=True)
    spec_ = manifest["spec"]
    if manifest["kind"] == "ScaledObject":
        assert manifest["apiVersion"] == "keda.sh/v1alpha1"
        assert set(spec_) <= SCALED_OBJECT_SPEC
        assert all(set(t) <= KEDA_TRIGGER and all(isinstance(v, str) for v in t["metadata"].values())
                   for t in spec_["triggers"])
        assert spec_["minReplicaCount"] <= spec_["maxReplicaCount"]
    else:
        assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(spec_) <= POD_MONITOR_SPEC
        assert all(set(e) <= POD_METRICS_ENDPOINT for e in spec_["podMetricsEndpoints"])
        assert all(isinstance(label, str) for label in spec_.get("podTargetLabels", []))
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x"},
               "spec": {"selector": spec_["selector"], "maxUnavailable": 1}}
        kubernetes_validate.validate(pdb, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("version", "server"), [(OLDEST, (1, 25)), (NEWEST, (1, 37))], ids=["oldest", "newest"])
@pytest.mark.parametrize("body", [samples.minimal(), samples.full(), samples.scale_to_zero(),
                                  samples.scale_to_zero(kind="mysql")],
                         ids=["minimal", "full", "scale-to-zero", "scale-to-zero-mysql"])
def test_every_built_manifest_is_valid(body: dict[str, Any], version: str, server: tuple[int, int]) -> None:
    """Valid, with no field the server lacks, from the oldest supported Kubernetes to the newest."""
    parsed = spec.parse(body)
    caps = kinds.Capabilities(keda=True, pod_monitors=True, server_version=server)
    manifests = [m for m in owned.desired(parsed, caps).values() if m is not None]
    assert manifests
    for manifest in manifests:
        _validate(owned.owned_by(manifest, body), version)


def _container(dep: dict[str, Any], name: str = "worker", *, init: bool = False) -> dict[str, Any]:
    containers = dep["spec"]["template"]["spec"]["initContainers" if init else "containers"]
    return next(c for c in containers if c["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_deployment_runs_dbworker_without_a_shell_and_migrates_first() -> None:
    dep = deployment.build(spec.parse(samples.minimal()), replicas=1)
    worker = _container(dep)
    assert worker["command"] == ["dbworker", "run", "imgdedup.jobs:coordinator"]
    assert "args" not in worker
    migrate = _container(dep, "migrate", init=True)
    assert migrate["command"] == ["dbworker", "migrate", "imgdedup.jobs:coordinator"]
    assert _env(migrate)["DATABASE_URL"] == _env(worker)["DATABASE_URL"]
    no_migrate = deployment.build(spec.parse(samples.with_spec(samples.minimal(), migrate=False)), replicas=1)
    assert "initContainers" not in no_migrate["spec"]["template"]["spec"]


def test_deployment_probes_ports_and_termination() -> None:
    dep = deployment.build(spec.parse(samples.full()), replicas=3)
    pod = dep["spec"]["template"]["spec"]
    worker = _container(dep)
    assert worker["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTP"}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": "HTTP"}
    assert worker["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["terminationGracePeriodSeconds"] == 60 + deployment.GRACE_MARGIN_SECONDS
    assert {"name": "tmp", "mountPath": "/tmp"} in worker["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
    assert dep["spec"]["replicas"] == 3
    minimal = deployment.build(spec.parse(samples.minimal()), replicas=1)["spec"]["template"]["spec"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}} in minimal["volumes"], "/tmp is always bounded"


def _restricted(pod: dict[str, Any]) -> None:
    """Admitted by the `restricted` Pod Security Standard, and hardened beyond it (read-only root)."""
    assert restricted.violations(pod) == []
    for container in [*pod["containers"], *pod.get("initContainers", [])]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_deployment_is_hardened() -> None:
    dep = deployment.build(spec.parse(samples.minimal()), replicas=1)
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["automountServiceAccountToken"] is False
    _restricted(pod)
    for container in [*pod["containers"], *pod["initContainers"]]:
        assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_security_context_fields_restricted_allows_come_from_the_spec() -> None:
    """An image whose USER is a name or root runs with the spec's numeric user; restricted holds."""
    pod = deployment.build(spec.parse(samples.full()), replicas=1)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                      "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                      "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [2000]}
    _restricted(pod)
    for container in [*pod["containers"], *pod["initContainers"]]:
        assert container["securityContext"]["seccompProfile"] == {
            "type": "Localhost", "localhostProfile": "profiles/dbworker.json"}
    # What restricted forbids cannot be asked for: the parser refuses it, naming the field.
    for field_, value in (("podSecurityContext", {"runAsUser": 0}),
                          ("podSecurityContext", {"runAsNonRoot": False}),
                          ("containerSecurityContext", {"privileged": True}),
                          ("containerSecurityContext", {"seccompProfile": {"type": "Unconfined"}})):
        with pytest.raises(spec.SpecError, match=f"spec.{field_}"):
            spec.parse(samples.with_spec(samples.minimal(), **{field_: value}))


def test_no_api_token_unless_the_spec_asks() -> None:
    with_account = samples.with_spec(samples.minimal(), serviceAccountName="imgdedup")
    pod = deployment.build(spec.parse(with_account), replicas=1)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "imgdedup" and pod["automountServiceAccountToken"] is False
    asked = samples.with_spec(with_account, automountServiceAccountToken=True)
    assert deployment.build(spec.parse(asked), replicas=1)["spec"]["template"]["spec"][
        "automountServiceAccountToken"] is True


def test_prometheus_annotations_only_without_a_pod_monitor() -> None:
    """A Prometheus honouring both the annotations and a PodMonitor would scrape each pod twice."""
    parsed = spec.parse(samples.full())  # metrics.podMonitor: true
    scraped = owned.desired(parsed, ALL)[kinds.DEPLOYMENT]
    assert scraped is not None
    annotations = scraped["spec"]["template"]["metadata"]["annotations"]
    assert not any(k.startswith("prometheus.io/") for k in annotations)
    assert annotations["example.com/owner"] == "media"
    unmonitored = owned.desired(parsed, kinds.Capabilities())[kinds.DEPLOYMENT]  # no Prometheus Operator
    assert unmonitored is not None
    assert unmonitored["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9200"


def test_deployment_environment_carries_the_spec_and_the_secret_reference() -> None:
    env = _env(_container(deployment.build(spec.parse(samples.full()), replicas=3)))
    # The user's clashing APP_DATABASE_URL was dropped: the Secret's URL stays.
    assert env["APP_DATABASE_URL"] == {"secretKeyRef": {"name": "imgdedup-db", "key": "url"}}
    assert "DATABASE_URL" not in env
    assert env["DBWORKER_WORKER"] == "hash,compare"
    assert env["DBWORKER_CONCURRENCY"] == "compare=2,hash=4"
    assert env["DBWORKER_LEASE_SECONDS"] == "30"
    assert env["DBWORKER_POLL_SECONDS"] == "0.5"
    assert env["DBWORKER_MAX_POLL_SECONDS"] == "5"
    assert env["DBWORKER_DRAIN_SECONDS"] == "60"
    assert env["DBWORKER_METRICS_PORT"] == "9200"
    assert env["LOG_LEVEL"] == "debug"
    minimal_env = _env(_container(deployment.build(spec.parse(samples.minimal()), replicas=1)))
    assert "DBWORKER_WORKER" not in minimal_env and "DBWORKER_LEASE_SECONDS" not in minimal_env


def test_selector_is_stable_across_spec_changes() -> None:
    base = samples.full()
    variants = [base, samples.with_spec(base, image="other:2", workers=["hash"], concurrency={"hash": 1},
                                        podLabels={"team": "other", "tier": "x"}, replicas=0)]
    selectors = {str(deployment.build(spec.parse(v), replicas=1)["spec"]["selector"]) for v in variants}
    assert selectors == {str({"matchLabels": labels.selector("imgdedup")})}
    dep = deployment.build(spec.parse(base), replicas=1)
    template_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert template_labels["team"] == "media"
    assert labels.selector("imgdedup").items() <= template_labels.items()


def test_backlog_query_selects_pods_by_label_whatever_the_name() -> None:
    """Pod names are truncated from about 47 characters and a name prefix matches other Workers;
    the selector labels match exactly, at any length the CRD admits."""
    longest = "w" * 63
    query = autoscaling.backlog_query(spec.parse(samples.minimal(longest)))
    assert f'app_kubernetes_io_instance="{longest}"' in query and 'app_kubernetes_io_name="dbworker"' in query
    assert "pod=" not in query and "=~" not in query
    short = autoscaling.backlog_query(spec.parse(samples.minimal("a")))
    assert 'app_kubernetes_io_instance="a"' in short and 'app_kubernetes_io_instance="a-b"' not in short
    # The PodMonitor carries exactly those pod labels into the series, under those names.
    monitor = monitoring.build(spec.parse(samples.with_spec(samples.minimal("a"), metrics={"podMonitor": True})))
    assert monitor is not None
    carried = {autoscaling.series_label(label) for label in monitor["spec"]["podTargetLabels"]}
    assert carried == {"app_kubernetes_io_name", "app_kubernetes_io_instance"}


def test_names_the_operator_cannot_serve_are_refused() -> None:
    for bad in ("w" * 64, "Upper", "dotted.name", "-dash"):
        with pytest.raises(spec.SpecError, match=r"metadata\.name"):
            spec.parse(samples.minimal(bad))


def test_scaled_object_targets_the_deployment_on_backlog() -> None:
    scaled = autoscaling.build(spec.parse(samples.full()))
    assert scaled is not None
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "imgdedup"}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 10)
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "0.8"
    assert 'namespace="apps"' in trigger["metadata"]["query"] and "dbworker_backlog" in trigger["metadata"]["query"]
    assert "cooldownPeriod" not in scaled["spec"], "KEDA uses it only between 1 and 0 pods"
    assert autoscaling.build(spec.parse(samples.minimal())) is None


def test_pod_monitor_and_budget() -> None:
    parsed = spec.parse(samples.full())
    monitor = monitoring.build(parsed)
    assert monitor is not None
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"] == {"matchLabels": labels.selector("imgdedup")}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert labels.common("imgdedup").items() <= monitor["metadata"]["labels"].items()
    pdb = disruption.build(parsed, ALL)
    assert pdb is not None and pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    minimal = spec.parse(samples.minimal())
    assert monitoring.build(minimal) is None and disruption.build(minimal, ALL) is None


def test_pod_monitor_labels_default_from_the_operator_and_the_worker_wins() -> None:
    body = samples.with_spec(samples.minimal(), metrics={"podMonitor": True, "podMonitorLabels": {"team": "media"}})
    parsed = spec.parse(body, pod_monitor_labels={"release": "prom", "team": "ops"})
    monitor = monitoring.build(parsed)
    assert monitor is not None
    assert {"release": "prom", "team": "media"}.items() <= monitor["metadata"]["labels"].items()
    with pytest.raises(spec.SpecError, match=r"spec\.metrics\.podMonitorLabels"):
        spec.parse(samples.with_spec(samples.minimal(), metrics={"podMonitorLabels": {"bad key!": "x"}}))


@pytest.mark.parametrize(("server", "sent"), [(None, False), ((1, 25), False), ((1, 26), False), ((1, 27), True),
                                              ((1, 33), True)])
def test_unhealthy_pod_eviction_policy_only_where_the_server_has_it(server: tuple[int, int] | None,
                                                                    sent: bool) -> None:
    """Alpha and off by default in 1.26, absent before: a dropped field would be re-patched forever."""
    pdb = disruption.build(spec.parse(samples.full()), kinds.Capabilities(server_version=server))
    assert pdb is not None
    assert ("unhealthyPodEvictionPolicy" in pdb["spec"]) is sent
    if sent:
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_desired_follows_capabilities_and_leaves_replicas_to_keda() -> None:
    parsed = spec.parse(samples.full())
    none = owned.desired(parsed, kinds.Capabilities())
    assert set(none) == {kinds.DEPLOYMENT, kinds.PDB}
    plain_dep = none[kinds.DEPLOYMENT]
    assert plain_dep is not None and plain_dep["spec"]["replicas"] == 3
    keda_dep = owned.desired(parsed, ALL)[kinds.DEPLOYMENT]
    assert keda_dep is not None and "replicas" not in keda_dep["spec"]
    assert owned.initial_fields(kinds.DEPLOYMENT, parsed, ALL) == {"spec": {"replicas": 2}}  # the minimum
    assert owned.initial_fields(kinds.DEPLOYMENT, parsed, kinds.Capabilities()) == {}
    assert owned.initial_fields(kinds.PDB, parsed, ALL) == {}
    plain = owned.desired(spec.parse(samples.minimal()), ALL)
    assert plain[kinds.SCALED_OBJECT] is None and plain[kinds.POD_MONITOR] is None and plain[kinds.PDB] is None


def test_owner_reference_points_at_the_worker() -> None:
    body = samples.minimal()
    manifest = owned.owned_by(deployment.build(spec.parse(body), replicas=1), body)
    assert manifest["metadata"]["ownerReferences"] == [{
        "apiVersion": "dbworker.dev/v1alpha1", "kind": "Worker", "name": "imgdedup", "uid": "0000-uid",
        "controller": True, "blockOwnerDeletion": True}]


def test_the_restricted_check_has_teeth() -> None:
    pod = deployment.build(spec.parse(samples.minimal()), replicas=1)["spec"]["template"]["spec"]
    pod["securityContext"]["runAsNonRoot"] = False
    pod["containers"][0]["securityContext"] = {**pod["containers"][0]["securityContext"], "runAsNonRoot": False,
                                               "capabilities": {"add": ["SYS_ADMIN"]}}
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    found = restricted.violations(pod)
    assert any("runAsNonRoot" in f for f in found) and any("SYS_ADMIN" in f for f in found)
    assert any("hostPath" in f for f in found) and any("drop ALL" in f for f in found)


def test_the_validation_has_teeth() -> None:
    """A built Deployment with one wrong field fails the same check the builders pass."""
    broken = deployment.build(spec.parse(samples.minimal()), replicas=1)
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)
    unknown = deployment.build(spec.parse(samples.minimal()), replicas=1)
    unknown["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(unknown)
