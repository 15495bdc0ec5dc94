"""The real operator (`python -m dbworker_operator`, kopf underneath) against the emulated API.

One emulator and one operator process serve the whole module (startup is the slow part); each
test uses its own Worker. The test acts as kubectl and as the Deployment controller would
(patching Deployment status, creating pods), over HTTP. Fake pods' /metrics are served on
127.0.0.2 and 127.0.0.3 so the operator scrapes two distinct "pods" on one port.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dbworker_operator import install, kinds

from tests.k8s import samples
from tests.k8s.emulator import running
from tests.k8s.harness import (
    DEPLOYMENTS,
    MERGE,
    NS,
    PODS,
    WORKERS,
    FakePod,
    Operator,
    admission,
    free_port,
    never_called,
    not_allowed,
    pod,
)

# Whole on one parallel worker, in order (tests/scheduling.py's WHOLE_MODULES): its operators
# are module-scoped, and its last test checks that the tests before it used every RBAC rule.

PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
SERVICES = f"/api/v1/namespaces/{NS}/services"


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running(validators=admission()) as emulator:
        # Secrets readable in the tests' namespace: the Secret is checked before anything is built.
        operator = Operator(emulator, tmp_path_factory.mktemp("operator"),
                            env={"DBWORKER_OPERATOR_SECRET_NAMESPACES": NS})
        try:
            operator.wait_live()
            yield operator
        finally:
            operator.stop()
        assert not operator.error_lines(), "\n".join(operator.error_lines())


@pytest.fixture(scope="module")
def pods() -> Iterator[tuple[FakePod, FakePod]]:
    port = free_port("127.0.0.2")
    a, b = FakePod("127.0.0.2", port), FakePod("127.0.0.3", port)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_create_builds_the_deployment_and_reports_ready(op: Operator) -> None:
    op.secret("alpha-db", {"url": "postgresql://app:s3cret@db/app"})
    worker = op.worker("alpha", workers=["hash"], replicas=2)
    dep = op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "the Deployment")
    assert dep["metadata"]["ownerReferences"][0]["uid"] == worker["metadata"]["uid"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["dbworker", "run", "imgdedup.jobs:coordinator"]
    assert dep["spec"]["replicas"] == 2
    op.wait(lambda: (op.condition("alpha", "Progressing") or {}).get("status") == "True", "Progressing=True")
    assert (op.condition("alpha", "Ready") or {}).get("status") == "False"
    op.act_as_deployment_controller("alpha")
    op.wait(lambda: (op.condition("alpha", "Ready") or {}).get("status") == "True", "Ready=True")
    final = op.get(f"{WORKERS}/alpha") or {}
    assert final["status"]["readyReplicas"] == 2 and final["status"]["observedGeneration"] == 1
    assert final["status"]["selector"] == "app.kubernetes.io/instance=alpha,app.kubernetes.io/name=dbworker"
    assert not final["metadata"].get("finalizers"), "a finalizer could hang namespace deletion"
    op.wait(lambda: ("Normal", "Applied", "Created Deployment alpha") in op.events("alpha"), "the Deployment's Event")
    assert "s3cret" not in op.log()


def _running_worker(op: Operator, name: str, **spec: Any) -> dict[str, Any]:
    """A Worker with its Secret, once its Deployment exists; returns the Deployment."""
    op.secret(f"{name}-db", {"url": "sqlite:///x"})
    op.worker(name, **spec)
    return dict(op.wait(lambda: op.get(f"{DEPLOYMENTS}/{name}"), f"{name}'s Deployment"))


def test_update_rolls_out_the_new_spec(op: Operator) -> None:
    _running_worker(op, "upd", workers=["hash"], nodeSelector={"disk": "ssd"})
    op.patch(f"{WORKERS}/upd", {"spec": {"image": "registry.example/imgdedup:2.0", "concurrency": {"hash": 3},
                                         "nodeSelector": None}})
    def rolled() -> bool:
        dep = op.get(f"{DEPLOYMENTS}/upd") or {}
        pod_spec = dep["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod_spec["containers"][0]["env"]}
        return (pod_spec["containers"][0]["image"].endswith(":2.0") and env.get("DBWORKER_CONCURRENCY") == "hash=3"
                and "nodeSelector" not in pod_spec)
    op.wait(rolled, "the new image and concurrency in the Deployment, the dropped nodeSelector gone")
    op.act_as_deployment_controller("upd")
    op.wait(lambda: (op.get(f"{WORKERS}/upd") or {}).get("status", {}).get("observedGeneration") == 2,
            "observedGeneration 2")


def test_scale_subresource_scales_the_deployment(op: Operator) -> None:
    _running_worker(op, "scl")
    response = op.api.patch(f"{WORKERS}/scl/scale", json={"spec": {"replicas": 4}}, headers=MERGE)
    assert response.status_code == 200, response.text
    op.wait(lambda: (op.get(f"{DEPLOYMENTS}/scl") or {})["spec"].get("replicas") == 4, "4 replicas")
    op.act_as_deployment_controller("scl")
    op.wait(lambda: (op.get(f"{WORKERS}/scl") or {}).get("status", {}).get("replicas") == 4, "status.replicas 4")


def test_drift_is_put_back(op: Operator) -> None:
    dep = _running_worker(op, "drf", replicas=2)
    containers = dep["spec"]["template"]["spec"]["containers"]
    containers[0]["image"] = "evil:latest"
    op.patch(f"{DEPLOYMENTS}/drf", {"spec": {"replicas": 9, "template": {"spec": {"containers": containers}}}})
    def restored() -> bool:
        current = op.get(f"{DEPLOYMENTS}/drf") or {}
        image = str(current["spec"]["template"]["spec"]["containers"][0]["image"])
        return image == "registry.example/imgdedup:1.0" and current["spec"]["replicas"] == 2
    op.wait(restored, "the edited Deployment restored")
    op.delete(f"{DEPLOYMENTS}/drf")
    recreated = op.wait(lambda: op.get(f"{DEPLOYMENTS}/drf"), "the deleted Deployment recreated")
    assert recreated["metadata"]["uid"] != dep["metadata"]["uid"]


def test_missing_secret_and_key_degrade_with_the_fix_then_recover(op: Operator) -> None:
    op.worker("beta")
    degraded = op.wait(lambda: op.condition("beta", "Degraded"), "a Degraded condition")
    assert degraded["status"] == "True" and degraded["reason"] == "SecretNotFound"
    assert "beta-db" in degraded["message"] and "create secret" in degraded["message"]
    assert op.get(f"{DEPLOYMENTS}/beta") is None, "nothing half-built while the Secret is missing"
    op.wait(lambda: any(e[:2] == ("Warning", "SecretNotFound") for e in op.events("beta")), "a Warning event")
    op.secret("beta-db", {"wrong": "postgresql://x"})
    op.wait(lambda: (op.condition("beta", "Degraded") or {}).get("reason") == "SecretKeyMissing", "SecretKeyMissing")
    assert "spec.database.urlSecretRef.key" in (op.condition("beta", "Degraded") or {})["message"]
    op.patch(f"{WORKERS}/beta", {"spec": {"database": {"urlSecretRef": {"key": "wrong"}}}})
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/beta"), "the Deployment once the Secret is right")
    op.wait(lambda: (op.condition("beta", "Degraded") or {}).get("status") == "False", "Degraded=False")
    op.wait(lambda: any(e[1] == "Recovered" for e in op.events("beta")), "a Recovered event")
    assert op.process.poll() is None, "the operator kept running"


def test_the_api_server_rejects_what_the_schema_can(op: Operator) -> None:
    if not op.emulator.cluster or not op.emulator.cluster.validators:
        pytest.skip("cel-python is not installed: the emulator has no admission")
    body = {"metadata": {"name": "nodb"}, "spec": {"image": "x", "app": "a.b:c", "replicas": -1, "database": {}}}
    response = op.api.post(WORKERS, json=body)
    assert response.status_code == 422
    assert "urlSecretRef" in response.json()["message"] and "replicas" in response.json()["message"]
    assert op.get(f"{WORKERS}/nodb") is None


def test_spec_the_schema_would_reject_is_reported_not_crashed_on(op: Operator) -> None:
    op.secret("gamma-db", {"url": "sqlite:///x"})
    cluster = op.emulator.cluster
    assert cluster is not None
    op.emulator.call(setattr, cluster, "enforce", False)  # as with an older, laxer CRD installed
    try:
        op.worker("gamma", app="not-module-attr")
    finally:
        op.emulator.call(setattr, cluster, "enforce", True)
    degraded = op.wait(lambda: op.condition("gamma", "Degraded"), "a Degraded condition")
    assert degraded["reason"] == "InvalidSpec" and "spec.app" in degraded["message"]
    assert op.get(f"{DEPLOYMENTS}/gamma") is None


def test_numbers_and_variables_an_older_crd_let_through_are_reported_not_built(op: Operator) -> None:
    """A lease of 1e308 s (which kills the pods' lease keeper) and a spec.env setting the command's
    own variable: refused by the operator as by the API server, the message naming the field."""
    op.secret("huge-db", {"url": "sqlite:///x"})
    op.secret("envy-db", {"url": "sqlite:///x"})
    cluster = op.emulator.cluster
    assert cluster is not None
    op.emulator.call(setattr, cluster, "enforce", False)  # as with an older, laxer CRD installed
    try:
        op.worker("huge", leaseSeconds=1e308)
        op.worker("envy", env=[{"name": "DBWORKER_LEASE_SECONDS", "value": "1e308"}])
    finally:
        op.emulator.call(setattr, cluster, "enforce", True)
    huge = op.wait(lambda: op.condition("huge", "Degraded"), "a Degraded condition")
    assert huge["reason"] == "InvalidSpec" and "spec.leaseSeconds is 1e+308" in huge["message"], huge
    envy = op.wait(lambda: op.condition("envy", "Degraded"), "a Degraded condition")
    assert envy["reason"] == "InvalidSpec" and "set spec.leaseSeconds instead" in envy["message"], envy
    assert op.get(f"{DEPLOYMENTS}/huge") is None and op.get(f"{DEPLOYMENTS}/envy") is None
    if cluster.validators:
        body = samples.with_spec(samples.minimal("envy2", NS), env=[{"name": "DBWORKER_METRICS_HOST", "value": "x"}])
        response = op.api.post(WORKERS, json={**body, "metadata": {"name": "envy2"}})
        assert response.status_code == 422 and "spec.env may not set DBWORKER_*" in response.text, response.text


def test_unknown_worker_reported_by_a_pod_degrades(op: Operator) -> None:
    op.secret("delta-db", {"url": "sqlite:///x"})
    op.worker("delta", workers=["resize"])
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/delta"), "the Deployment")
    # The `dbworker` command's termination-log line: its reason token, then its stderr message.
    message = "dbworker[UnknownWorker]: unknown worker 'resize' (--worker); known workers: hash, compare\n"
    op.create(PODS, pod("delta-abc-1", "delta", "127.0.0.9", ready=False,
                         state={"waiting": {"reason": "CrashLoopBackOff"}},
                         lastState={"terminated": {"exitCode": 2, "message": message}}))
    op.wait(lambda: (op.condition("delta", "Degraded") or {}).get("reason") == "UnknownWorker", "UnknownWorker")
    degraded = (op.condition("delta", "Degraded") or {})["message"]
    assert "exited with code 2: dbworker: unknown worker 'resize'" in degraded
    assert "known workers: hash, compare" in degraded and "spec.workers" in degraded


def test_image_that_never_pulls_degrades_and_names_the_fix(op: Operator) -> None:
    op.secret("eta-db", {"url": "sqlite:///x"})
    op.worker("eta", image="registry.example/typo:1.0")
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/eta"), "the Deployment")
    op.create(PODS, pod("eta-abc-1", "eta", "127.0.0.9", ready=False,
                        state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}))
    degraded = op.wait(lambda: op.condition("eta", "Degraded"), "a Degraded condition")
    op.wait(lambda: (op.condition("eta", "Degraded") or {}).get("reason") == "ImagePullFailed", "ImagePullFailed")
    degraded = op.condition("eta", "Degraded") or {}
    assert "registry.example/typo:1.0" in degraded["message"] and "spec.imagePullSecrets" in degraded["message"]
    assert (op.condition("eta", "Ready") or {}).get("reason") == "ImagePullFailed"


def test_backlog_and_pod_deletion_cost_come_from_pod_metrics(op: Operator, pods: tuple[FakePod, FakePod]) -> None:
    busy, idle = pods
    port = busy.server.server_address[1]
    busy.text = 'dbworker_backlog{worker="hash"} 10\ndbworker_handlers_active{worker="hash"} 3\n'
    idle.text = 'dbworker_backlog{worker="hash"} 9\ndbworker_handlers_active{worker="hash"} 0\n'
    op.secret("epsilon-db", {"url": "sqlite:///x"})
    op.worker("epsilon", metrics={"port": port})
    op.create(PODS, pod("epsilon-abc-1", "epsilon", busy.ip))
    op.create(PODS, pod("epsilon-abc-2", "epsilon", idle.ip))
    op.wait(lambda: (op.get(f"{WORKERS}/epsilon") or {}).get("status", {}).get("backlog") == 10, "backlog 10")

    def cost(pod: str) -> str | None:
        annotations = (op.get(f"{PODS}/{pod}") or {}).get("metadata", {}).get("annotations") or {}
        return annotations.get("controller.kubernetes.io/pod-deletion-cost")
    op.wait(lambda: cost("epsilon-abc-1") == "3" and cost("epsilon-abc-2") == "0", "deletion costs 3 and 0")

    def pod_patches() -> int:
        return sum(1 for group, resource, verb, name in op.requests()
                   if (resource, verb) == ("pods", "patch") and str(name).startswith("epsilon-"))
    patched = pod_patches()
    passes = op.resync_passes()
    op.wait(lambda: op.resync_passes() > passes + 3, "a few resync passes with the same metrics")
    assert pod_patches() == patched, "a pod is patched only when its cost changes, not every resync"
    busy.text = 'dbworker_backlog{worker="hash"} 0\ndbworker_handlers_active{worker="hash"} 0\n'
    op.wait(lambda: cost("epsilon-abc-1") == "0", "the busy pod's cost back to 0 once idle")
    assert pod_patches() == patched + 1
    scrapes = [h for fake in pods for h in fake.headers]
    assert scrapes and not any("authorization" in {k.lower() for k in h} for h in scrapes), \
        "the operator's API token must never be sent to pods"


def test_a_budget_is_kept_warned_about_and_removed(op: Operator) -> None:
    """A PDB with the eviction policy the server has (/version 1.31), put back when edited, a
    condition when it blocks every drain, deleted when the spec drops it."""
    _running_worker(op, "budget", replicas=1, disruptionBudget={"minAvailable": 1})
    pdb = op.wait(lambda: op.get(f"{PDBS}/budget"), "the PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    blocked = op.wait(lambda: op.condition("budget", "DrainBlocked"), "a DrainBlocked condition")
    assert (blocked["status"], blocked["reason"]) == ("True", "BudgetAllowsNoEviction")
    op.wait(lambda: any(e[:2] == ("Warning", "BudgetAllowsNoEviction") for e in op.events("budget")),
            "a Warning event about the budget")
    op.patch(f"{PDBS}/budget", {"spec": {"minAvailable": 0}})
    op.wait(lambda: (op.get(f"{PDBS}/budget") or {})["spec"]["minAvailable"] == 1, "the edited budget put back")
    op.patch(f"{WORKERS}/budget", {"spec": {"replicas": 3}})
    op.wait(lambda: (op.condition("budget", "DrainBlocked") or {}).get("status") == "False", "DrainBlocked=False")
    op.patch(f"{WORKERS}/budget", {"spec": {"disruptionBudget": None}})
    op.wait(lambda: op.get(f"{PDBS}/budget") is None, "the budget deleted")
    op.wait(lambda: op.condition("budget", "DrainBlocked") is None, "no DrainBlocked condition without a budget")


def test_names_up_to_63_characters_work_and_longer_ones_are_refused_at_the_door(op: Operator) -> None:
    longest = "n" * 63
    dep = _running_worker(op, longest)
    assert dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == longest
    if not op.emulator.cluster or not op.emulator.cluster.validators:
        pytest.skip("cel-python is not installed: the emulator has no admission")
    response = op.api.post(WORKERS, json={**samples.minimal("n" * 64, NS), "metadata": {"name": "n" * 64}})
    assert response.status_code == 422 and "metadata.name" in response.json()["message"]


def test_autoscaling_without_keda_says_why_nothing_scales(op: Operator) -> None:
    op.secret("zeta-db", {"url": "sqlite:///x"})
    op.worker("zeta", replicas=2, autoscaling={"minReplicas": 1, "maxReplicas": 5})
    cond = op.wait(lambda: op.condition("zeta", "AutoscalingActive"), "an AutoscalingActive condition")
    assert cond["status"] == "False" and cond["reason"] == "KEDANotInstalled"
    assert (op.get(f"{DEPLOYMENTS}/zeta") or {})["spec"]["replicas"] == 2


def test_deleting_the_worker_removes_what_it_owns(op: Operator) -> None:
    _running_worker(op, "del")
    op.delete(f"{WORKERS}/del")  # no finalizer: gone at once, owner references do the rest
    op.wait(lambda: op.get(f"{WORKERS}/del") is None, "the Worker gone")
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/del") is None, "its Deployment collected")
    passes = op.resync_passes()
    op.wait(lambda: op.resync_passes() > passes + 3, "a few more resync passes")
    assert op.get(f"{DEPLOYMENTS}/del") is None, "the operator must not resurrect a deleted Worker's objects"


def test_operator_metrics_count_reconciles_without_errors(op: Operator) -> None:
    assert op.metric("dbworker_operator_reconciles_total", 'result="ok"') > 0
    assert op.metric("dbworker_operator_reconciles_total", 'kind="resync",result="error"') == 0
    workers = len((op.get(WORKERS) or {})["items"])
    degraded = sum(1 for w in (op.get(WORKERS) or {})["items"] for c in w.get("status", {}).get("conditions", [])
                   if c["type"] == "Degraded" and c["status"] == "True")
    assert degraded >= 3  # gamma (spec), delta (unknown worker), eta (image)
    op.wait(lambda: op.metric("dbworker_operator_workers", "") == workers
            and op.metric("dbworker_operator_workers_degraded", "") == degraded, "the Worker gauges")
    assert "Traceback" not in op.log()


def test_the_console_runs_beside_the_workers_is_kept_and_goes_when_turned_off(op: Operator) -> None:
    op.secret("cons-db", {"url": "postgresql://app:s3cret@db/app"})
    op.secret("cons-console", {"tokens": "ops=console-token-0123456789"})
    worker = op.worker("cons", console={"enabled": True, "tokenSecretRef": {"name": "cons-console", "key": "tokens"}})
    uid = worker["metadata"]["uid"]
    dep = op.wait(lambda: op.get(f"{DEPLOYMENTS}/cons-console"), "the console's Deployment")
    svc = op.wait(lambda: op.get(f"{SERVICES}/cons-console"), "the console's Service")
    assert dep["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["ownerReferences"][0]["uid"] == uid
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"][:3] == [
        "dbworker", "console", "imgdedup.jobs:coordinator"]
    assert svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    workers = op.wait(lambda: op.get(f"{DEPLOYMENTS}/cons"), "the workers' Deployment beside it")
    assert workers["spec"]["template"]["spec"]["containers"][0]["command"][1] == "run"
    op.wait(lambda: ("Normal", "Applied", "Created Service cons-console") in op.events("cons"), "the Service's Event")
    # The status is the workers': the console's Deployment never stands in for theirs.
    op.act_as_deployment_controller("cons")
    op.wait(lambda: (op.condition("cons", "Ready") or {}).get("status") == "True", "Ready=True from the workers")

    op.patch(f"{SERVICES}/cons-console", {"spec": {"ports": [{"name": "http", "port": 9999, "targetPort": "http"}]}})
    op.wait(lambda: (op.get(f"{SERVICES}/cons-console") or {})["spec"]["ports"][0]["port"] == 80,
            "the edited Service put back")
    op.delete(f"{DEPLOYMENTS}/cons-console")
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/cons-console"), "the deleted console Deployment recreated")
    op.patch(f"{WORKERS}/cons", {"spec": {"console": {"service": {"port": 8080}, "replicas": 2}}})
    op.wait(lambda: (op.get(f"{SERVICES}/cons-console") or {})["spec"]["ports"][0]["port"] == 8080
            and (op.get(f"{DEPLOYMENTS}/cons-console") or {})["spec"]["replicas"] == 2, "the spec's new port and count")

    op.patch(f"{WORKERS}/cons", {"spec": {"console": {"enabled": False}}})
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/cons-console") is None and op.get(f"{SERVICES}/cons-console") is None,
            "the console's Deployment and Service deleted")
    assert op.get(f"{DEPLOYMENTS}/cons") is not None, "the workers keep running"
    text = op.log() + str(op.events("cons")) + str(op.get(f"{WORKERS}/cons"))
    assert "console-token-0123456789" not in text and "s3cret" not in text


def test_a_console_without_its_token_is_refused_at_the_door(op: Operator) -> None:
    if not op.emulator.cluster or not op.emulator.cluster.validators:
        pytest.skip("cel-python is not installed: the emulator has no admission")
    body = samples.with_spec(samples.minimal("notoken", NS), console={"enabled": True})
    response = op.api.post(WORKERS, json={**body, "metadata": {"name": "notoken"}})
    assert response.status_code == 422 and "console.tokenSecretRef is required" in response.text, response.text


def test_every_api_call_is_allowed_by_the_generated_rbac_rules(op: Operator) -> None:
    """RBAC equals what is called, both ways: nothing the rules refuse, nothing granted unused
    (but the finalizers check and the add-on kinds this cluster does not serve)."""
    calls = op.api_calls()
    assert ("dbworker.dev", "workers", "watch") in calls
    rules = install.rbac_rules(scope="cluster", deletion_cost=True, secrets=True)  # Secrets readable in apps
    assert not_allowed(calls, rules) == set()
    assert never_called(calls, rules, not_served=(kinds.SCALED_OBJECT, kinds.TRIGGER_AUTHENTICATION,
                                                       kinds.POD_MONITOR)) == set()
