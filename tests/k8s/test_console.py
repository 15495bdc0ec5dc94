"""spec.console: the console's Deployment and Service (builders/console.py), its spec checks and CEL rules."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dbworker_operator import drift, kinds, labels, rules, spec
from dbworker_operator.builders import console, owned

from dbworker.console import app as console_app
from tests.k8s import restricted, samples
from tests.k8s.apiserver_rules import check
from tests.k8s.emulator import matches_selector

OLDEST, NEWEST = "1.25", kubernetes_validate.latest_version()
ALL = kinds.Capabilities(keda=True, pod_monitors=True, server_version=(1, 33))
CONSOLE = {"enabled": True, "tokenSecretRef": {"name": "imgdedup-console", "key": "tokens"}}


def _with_console(body: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return samples.with_spec(body or samples.minimal(), console={**CONSOLE, **fields})


def _built(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    parsed = spec.parse(body)
    dep, svc = console.build_deployment(parsed), console.build_service(parsed)
    assert dep is not None and svc is not None
    return dep, svc


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("base", [samples.minimal, samples.full], ids=["minimal", "full"])
def test_console_objects_are_valid_and_restricted(base: Any, version: str) -> None:
    body = _with_console(base())
    dep, svc = _built(body)
    for manifest in (dep, svc):
        kubernetes_validate.validate(owned.owned_by(manifest, body), version, strict=True)
    assert restricted.violations(dep["spec"]["template"]["spec"]) == []
    assert check(body) == []  # the CRD's schema and CEL rules admit it


def test_the_console_pod_is_the_workers_pod_with_the_console_container() -> None:
    body = _with_console(samples.full(), replicas=2, readOnly=True,
                         resources={"requests": {"cpu": "50m", "memory": "128Mi"}})
    parsed = spec.parse(body)
    dep, _ = _built(body)
    workers = owned.desired(parsed, ALL)[kinds.DEPLOYMENT]
    assert workers is not None
    pod, worker_pod = dep["spec"]["template"]["spec"], workers["spec"]["template"]["spec"]
    for key in ("securityContext", "volumes", "enableServiceLinks", "automountServiceAccountToken",
                "serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations", "affinity",
                "initContainers"):
        assert pod[key] == worker_pod[key], key
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]
    assert pod["terminationGracePeriodSeconds"] == console.GRACE_SECONDS
    [container] = pod["containers"]
    assert container["command"] == ["dbworker", "console", "imgdedup.jobs:coordinator",
                                    "--host", "0.0.0.0", "--port", str(rules.CONSOLE_PORT)]
    assert container["securityContext"] == worker_pod["containers"][0]["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = _env(container)
    assert env["APP_DATABASE_URL"] == {"secretKeyRef": {"name": "imgdedup-db", "key": "url"}}  # the same Secret
    assert env["DBWORKER_CONSOLE_TOKEN"] == {"secretKeyRef": {"name": "imgdedup-console", "key": "tokens"}}
    assert env["DBWORKER_READ_ONLY"] == "true" and env["LOG_LEVEL"] == "debug"
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"}}
    assert container["ports"] == [{"name": "http", "containerPort": rules.CONSOLE_PORT, "protocol": "TCP"}]
    assert dep["spec"]["replicas"] == 2
    assert "prometheus.io/scrape" not in dep["spec"]["template"]["metadata"]["annotations"]


def test_the_probes_use_the_consoles_open_health_path() -> None:
    dep, _ = _built(_with_console())
    [container] = dep["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] == "http" and get["path"] in console_app.OPEN_PATHS, probe  # answered without a token


def test_a_token_in_the_specs_env_cannot_replace_the_secrets() -> None:
    env_token = [{"name": "DBWORKER_CONSOLE_TOKEN", "value": "plain-text-token-in-the-spec"}]
    body = _with_console(samples.with_spec(samples.minimal(), env=env_token))
    # Refused at the door and by the operator, naming the field to use instead ...
    assert any("spec.env may not set DBWORKER_*" in p for p in check(body))
    with pytest.raises(spec.SpecError, match=r"spec\.env\[0\]\.name: DBWORKER_CONSOLE_TOKEN .* spec\.console\.tokenSecretRef"):
        spec.parse(body)
    # ... and a spec that got one past both still builds with the Secret's token only.
    parsed = dataclasses.replace(spec.parse(_with_console()), env=tuple(env_token))
    dep = console.build_deployment(parsed)
    assert dep is not None
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    tokens = [e for e in env if e["name"] == "DBWORKER_CONSOLE_TOKEN"]
    assert tokens == [{"name": "DBWORKER_CONSOLE_TOKEN",
                       "valueFrom": {"secretKeyRef": {"name": "imgdedup-console", "key": "tokens"}}}]


def test_the_service_selects_console_pods_and_the_workers_selector_does_not() -> None:
    body = _with_console(service={"type": "NodePort", "port": 8443})
    dep, svc = _built(body)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["metadata"]["name"] == dep["metadata"]["name"] == "imgdedup-console"
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8443, "targetPort": "http", "protocol": "TCP"}]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    # The PDB, PodMonitor, scrape and KEDA query pick worker pods by this selector: never a console pod.
    assert not matches_selector(pod_labels, labels.selector_string("imgdedup"))
    assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == labels.MANAGED_BY  # watched like ours


def test_objects_lists_the_console_beside_the_worker_named_ones() -> None:
    on = owned.objects(spec.parse(_with_console(samples.full())), ALL)
    named = {(w.kind.kind, w.name) for w in on if w.manifest is not None}
    assert ("Deployment", "imgdedup") in named and ("Deployment", "imgdedup-console") in named
    assert ("Service", "imgdedup-console") in named
    console_dep = next(w for w in on if w.name == "imgdedup-console" and w.kind is kinds.DEPLOYMENT)
    assert console_dep.on_create == {}, "KEDA's initial count is the workers', not the console's"
    workers_dep = next(w for w in on if w.name == "imgdedup" and w.kind is kinds.DEPLOYMENT)
    assert workers_dep.on_create == {"spec": {"replicas": 2}}
    off = owned.objects(spec.parse(samples.minimal()), ALL)
    assert {(w.kind.kind, w.name) for w in off if w.manifest is None} >= {
        ("Deployment", "imgdedup-console"), ("Service", "imgdedup-console")}  # so leftovers are deleted
    disabled = samples.with_spec(samples.minimal(), console={"enabled": False})
    assert spec.parse(disabled).console is None


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("no token", samples.with_spec(samples.minimal(), console={"enabled": True}),
     "spec.console.tokenSecretRef is required with spec.console.enabled",
     "console.tokenSecretRef is required with console.enabled"),
    ("name too long for the Service", _with_console(samples.minimal("w" * 56)),
     "metadata.name: '" + "w" * 56 + "' cannot name the console's Service", "at most 55 characters"),
    ("name starting with a digit", _with_console(samples.minimal("1mg")),
     "a letter first", "must start with a letter"),
    ("service type", _with_console(service={"type": "ExternalName"}), "spec.console.service.type", "is not one of"),
    ("service port", _with_console(service={"port": 0}), "spec.console.service.port is 0", "less than the minimum"),
]


@pytest.mark.parametrize(("case", "body", "operator", "apiserver"), BAD, ids=[b[0] for b in BAD])
def test_bad_console_specs_name_the_field_and_the_fix(case: str, body: dict[str, Any], operator: str,
                                                      apiserver: str) -> None:
    with pytest.raises(spec.SpecError, match=None) as raised:
        spec.parse(body)
    assert operator in str(raised.value), case
    assert any(apiserver in problem for problem in check(body)), (case, check(body))


def test_longest_name_with_a_console_is_accepted() -> None:
    body = _with_console(samples.minimal("w" * rules.CONSOLE_WORKER_NAME_MAX))
    assert check(body) == []
    _, svc = _built(body)
    assert len(svc["metadata"]["name"]) == 63
    kubernetes_validate.validate(svc, NEWEST, strict=True)


def test_the_examples_console_is_built_and_its_network_policies_admit_it() -> None:
    deploy = Path(__file__).resolve().parents[2] / "examples" / "imagededup" / "deploy"
    workers = [doc for doc in yaml.safe_load_all((deploy / "workers.yaml").read_text()) if doc]
    [body] = [w for w in workers if (w["spec"].get("console") or {}).get("enabled")]
    body["metadata"]["uid"] = "0000-uid"
    assert check(body) == []
    dep, svc = _built(body)
    for manifest in (dep, svc):
        kubernetes_validate.validate(owned.owned_by(manifest, body), NEWEST, strict=True)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all((deploy / "secret.yaml").read_text()) if d}
    token = body["spec"]["console"]["tokenSecretRef"]
    assert token["key"] in secrets[token["name"]]["stringData"]
    policies = {p["metadata"]["name"]: p for p in yaml.safe_load_all((deploy / "networkpolicy.yaml").read_text()) if p}

    def selects(selector: dict[str, Any]) -> bool:
        return all(pod_labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())

    assert selects(policies["dbworker-console"]["spec"]["podSelector"])
    assert policies["dbworker-console"]["spec"]["ingress"][0]["ports"][0]["port"] == rules.CONSOLE_PORT
    database = policies["postgres"]["spec"]["ingress"][0]["from"]
    assert any(selects(peer.get("podSelector", {})) for peer in database), "the console reaches PostgreSQL"


def test_a_service_switched_back_from_nodeport_loses_its_node_port() -> None:
    """The restore patch replaces the ports list whole (a merge patch does), so a node port the
    server allocated under NodePort does not linger under ClusterIP, which would refuse it."""
    _, svc = _built(_with_console())
    wanted = drift.annotate(svc)
    actual = drift.merged(wanted, {"spec": {"type": "NodePort", "clusterIP": "10.0.0.7", "ports": [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP", "nodePort": 31234}]}})
    patch = drift.restore_patch(actual, wanted)
    assert patch is not None and patch["spec"]["type"] == "ClusterIP"
    assert patch["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert "clusterIP" not in patch["spec"], "the server's own field is left alone"
    server_defaults = drift.merged(wanted, {"spec": {"clusterIP": "10.0.0.7", "sessionAffinity": "None"}})
    assert drift.restore_patch(server_defaults, wanted) is None, "server defaults are not drift"


@pytest.mark.parametrize("read_only", [False, True])
def test_the_dbworker_command_accepts_the_containers_arguments_and_environment(read_only: bool) -> None:
    """The container as the kubelet would start it (Secret references resolved) passes the
    `dbworker console` option checks: listening on every address, so the token is required."""
    from dbworker.pod import options, termination

    dep, _ = _built(_with_console(readOnly=read_only))
    [container] = dep["spec"]["template"]["spec"]["containers"]
    secrets = {("imgdedup-db", "url"): "sqlite:///x", ("imgdedup-console", "tokens"): "ops=0123456789abcdef0123"}
    env = {e["name"]: e["value"] if "value" in e else
           secrets[(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])]
           for e in container["env"]}
    assert container["command"][0] == "dbworker"
    parsed = options.parse(container["command"][1:], env)
    assert (parsed.command, parsed.app) == ("console", "imgdedup.jobs:coordinator")
    assert (parsed["host"], parsed["port"], parsed["read_only"]) == ("0.0.0.0", rules.CONSOLE_PORT, read_only)
    assert parsed["token"] and parsed["log_format"] == "json"
    without = {k: v for k, v in env.items() if k != "DBWORKER_CONSOLE_TOKEN"}
    with pytest.raises(termination.CommandError, match="needs a sign-in token"):
        options.parse(container["command"][1:], without)
