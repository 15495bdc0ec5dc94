"""The operator on a cluster with KEDA and the Prometheus Operator, and with two operator replicas.

KEDA's ScaledObject and a PodMonitor are created only where their APIs are served; while KEDA
drives the Deployment the operator leaves its replica count alone. Two replicas share the
work by kopf peering: the one with the lower priority stays paused, resync included.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from dbworker_operator import install

from tests.k8s import samples
from tests.k8s.emulator import running
from tests.k8s.harness import (
    DEPLOYMENTS,
    NS,
    WORKERS,
    Operator,
    admission,
    never_called,
    not_allowed,
)

# Whole on one parallel worker, in order (tests/scheduling.py's WHOLE_MODULES): its operators
# are module-scoped, and its last test checks that the tests before it used every RBAC rule.


SCALED_OBJECTS = f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects"
POD_MONITORS = f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/podmonitors"
PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
TRIGGER_AUTHENTICATIONS = f"/apis/keda.sh/v1alpha1/namespaces/{NS}/triggerauthentications"
SERVICES = f"/api/v1/namespaces/{NS}/services"


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Operator, Operator]]:
    tmp = tmp_path_factory.mktemp("operators")
    with running(addons=("keda", "prometheus-operator"), validators=admission()) as emulator:
        # No pod serves metrics here: run without deletion costs, so the RBAC audit is exact.
        env = {"DBWORKER_OPERATOR_DELETION_COST": "false",
               "DBWORKER_OPERATOR_POD_MONITOR_LABELS": "release=kube-prometheus-stack"}
        leader = Operator(emulator, tmp, priority=100, env=env)
        standby = Operator(emulator, tmp, priority=1, env=env)
        try:
            leader.wait_live()
            standby.wait_live()
            # Both have announced themselves in kopf's peering object: the standby has the leader in view.
            peering = "/apis/kopf.dev/v1/clusterkopfpeerings/dbworker-operator"
            leader.wait(lambda: len((leader.get(peering) or {}).get("status") or {}) == 2, "two peers")
            yield leader, standby
        finally:
            standby.stop()
            leader.stop()
        assert not leader.error_lines() and not standby.error_lines()


def test_keda_pod_monitor_and_budget_are_created_and_replicas_left_to_keda(ops: tuple[Operator, Operator]) -> None:
    op, _ = ops
    op.secret("scaled-db", {"url": "sqlite:///x"})
    worker = op.worker("scaled", replicas=1, autoscaling={"minReplicas": 2, "maxReplicas": 6},
                       metrics={"podMonitor": True}, disruptionBudget={"maxUnavailable": 1})
    uid = worker["metadata"]["uid"]
    for path in (f"{SCALED_OBJECTS}/scaled", f"{POD_MONITORS}/scaled", f"{PDBS}/scaled", f"{DEPLOYMENTS}/scaled"):
        obj = op.wait(functools.partial(op.get, path), path)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid, path
    assert (op.get(f"{DEPLOYMENTS}/scaled") or {})["spec"]["replicas"] == 2  # created at the minimum
    op.wait(lambda: (op.condition("scaled", "AutoscalingActive") or {}).get("status") == "True",
            "AutoscalingActive=True")
    op.wait(lambda: (op.condition("scaled", "PodMonitorActive") or {}).get("status") == "True",
            "PodMonitorActive=True")
    monitor = op.get(f"{POD_MONITORS}/scaled") or {}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack", "the chart's default labels"
    assert "cannot see whether a Prometheus selects it" in (op.condition("scaled", "PodMonitorActive") or {})["message"]
    query = (op.get(f"{SCALED_OBJECTS}/scaled") or {})["spec"]["triggers"][0]["metadata"]["query"]
    assert 'app_kubernetes_io_instance="scaled"' in query and "pod=~" not in query
    template = (op.get(f"{DEPLOYMENTS}/scaled") or {})["spec"]["template"]["metadata"]
    assert not any(k.startswith("prometheus.io/") for k in template.get("annotations", {})), "scraped twice"
    # Add-on objects drift back too (their `patch`).
    op.patch(f"{SCALED_OBJECTS}/scaled", {"spec": {"maxReplicaCount": 60}})
    op.patch(f"{POD_MONITORS}/scaled", {"spec": {"podMetricsEndpoints": [{"port": "other"}]}})
    op.patch(f"{PDBS}/scaled", {"spec": {"maxUnavailable": 3}})
    op.wait(lambda: (op.get(f"{PDBS}/scaled") or {})["spec"]["maxUnavailable"] == 1, "the budget put back")
    op.wait(lambda: (op.get(f"{SCALED_OBJECTS}/scaled") or {})["spec"]["maxReplicaCount"] == 6, "maxReplicaCount 6")
    op.wait(lambda: (op.get(f"{POD_MONITORS}/scaled") or {})["spec"]["podMetricsEndpoints"][0]["port"] == "metrics",
            "the PodMonitor's endpoint put back")

    op.patch(f"{DEPLOYMENTS}/scaled", {"spec": {"replicas": 5}})  # what KEDA's HPA does
    passes = op.resync_passes()
    op.wait(lambda: op.resync_passes() > passes + 3, "a few resync passes")
    assert (op.get(f"{DEPLOYMENTS}/scaled") or {})["spec"]["replicas"] == 5, "the operator fought KEDA"


def test_dropping_features_deletes_their_objects(ops: tuple[Operator, Operator]) -> None:
    op, _ = ops
    op.secret("dropped-db", {"url": "sqlite:///x"})
    op.worker("dropped", autoscaling={"maxReplicas": 4}, metrics={"podMonitor": True},
              disruptionBudget={"minAvailable": "50%"},
              console={"enabled": True, "tokenSecretRef": {"name": "dropped-console", "key": "tokens"}})
    for path in (f"{SCALED_OBJECTS}/dropped", f"{POD_MONITORS}/dropped", f"{PDBS}/dropped",
                 f"{SERVICES}/dropped-console", f"{DEPLOYMENTS}/dropped-console"):
        op.wait(functools.partial(op.get, path), path)
    # KEDA's initial count is the workers' Deployment's; the console keeps its own.
    assert (op.get(f"{DEPLOYMENTS}/dropped-console") or {})["spec"]["replicas"] == 1
    op.patch(f"{SERVICES}/dropped-console", {"spec": {"type": "NodePort"}})  # drift: the Service's `patch`
    op.wait(lambda: (op.get(f"{SERVICES}/dropped-console") or {})["spec"]["type"] == "ClusterIP", "ClusterIP again")
    op.patch(f"{WORKERS}/dropped", {"spec": {"autoscaling": None, "disruptionBudget": None,
                                             "metrics": {"podMonitor": False}, "replicas": 3,
                                             "console": {"enabled": False}}})
    op.wait(lambda: op.get(f"{SERVICES}/dropped-console") is None, "the console's Service deleted")
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/dropped-console") is None, "the console's Deployment deleted")
    op.wait(lambda: op.get(f"{SCALED_OBJECTS}/dropped") is None, "the ScaledObject deleted")
    op.wait(lambda: op.get(f"{PDBS}/dropped") is None, "the PodDisruptionBudget deleted")
    op.wait(lambda: op.get(f"{POD_MONITORS}/dropped") is None, "the PodMonitor deleted")
    op.wait(lambda: (op.get(f"{DEPLOYMENTS}/dropped") or {})["spec"]["replicas"] == 3, "spec.replicas back in charge")


def test_scale_from_zero_with_a_connection_budget(ops: tuple[Operator, Operator]) -> None:
    """minReplicas 0: the database trigger and its TriggerAuthentication; maxConnections caps KEDA
    and the ConnectionBudget condition gives the numbers; both kept and dropped like the rest."""
    op, _ = ops
    op.secret("zero-db", {"url": "postgresql+psycopg://u:pw@pgbouncer/app", "direct-url": "postgresql+psycopg://u:pw@db/app",
                          "keda": "postgresql://u:pw@db:5432/app"})
    zero = samples.scale_to_zero("zero")["spec"]
    op.worker("zero", **{k: v for k, v in zero.items() if k != "database"},
              database={**zero["database"], "urlSecretRef": {"name": "zero-db", "key": "url"},
                        "listenUrlSecretRef": {"name": "zero-db", "key": "direct-url"}})
    auth_path = f"{TRIGGER_AUTHENTICATIONS}/zero"
    auth = op.wait(functools.partial(op.get, auth_path), auth_path)
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "connection", "name": "zero-db", "key": "keda"}]
    scaled = op.wait(functools.partial(op.get, f"{SCALED_OBJECTS}/zero"), "the ScaledObject")
    # 2 workers x 8 + pool 5 + LISTEN 1 = 22 per pod; 200 // 22 = 9, one kept for a rollout.
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 8)
    assert [t["type"] for t in scaled["spec"]["triggers"]] == ["prometheus", "postgresql"]
    assert (op.get(f"{DEPLOYMENTS}/zero") or {})["spec"]["replicas"] == 0, "created at the minimum"
    cond = op.wait(lambda: op.condition("zero", "ConnectionBudget"), "the ConnectionBudget condition")
    assert cond["status"] == "True" and cond["reason"] == "AutoscalingCapped", cond
    assert "462 of spec.database.maxConnections 200" in cond["message"] and "at most 8" in cond["message"]
    # Events are posted after the status patch, in the background: waited for, not read once.
    op.wait(lambda: ("Warning", "AutoscalingCapped") in {(t, r) for t, r, _ in op.events("zero")},
            "the AutoscalingCapped event")  # fmt: skip
    worker = op.get(f"{WORKERS}/zero") or {}
    assert "pw" not in str(worker.get("status")) and all("pw" not in m for _, _, m in op.events("zero"))

    # A budget that fits: KEDA may use every pod the spec allows, the condition clears.
    op.patch(f"{WORKERS}/zero", {"spec": {"database": {"maxConnections": 22 * 21}}})
    op.wait(lambda: (op.get(f"{SCALED_OBJECTS}/zero") or {})["spec"]["maxReplicaCount"] == 20, "the cap lifted")
    op.wait(lambda: (op.condition("zero", "ConnectionBudget") or {}).get("reason") == "WithinBudget",
            "ConnectionBudget=False")
    # The TriggerAuthentication drifts back, and goes with the database trigger.
    op.patch(auth_path, {"spec": {"secretTargetRef": [{"parameter": "connection", "name": "other", "key": "k"}]}})
    op.wait(lambda: (op.get(auth_path) or {})["spec"]["secretTargetRef"][0]["name"] == "zero-db",
            "the TriggerAuthentication put back")
    op.patch(f"{WORKERS}/zero", {"spec": {"autoscaling": {"minReplicas": 1, "database": None}}})
    op.wait(lambda: op.get(auth_path) is None, "the TriggerAuthentication deleted")
    op.wait(lambda: len((op.get(f"{SCALED_OBJECTS}/zero") or {})["spec"]["triggers"]) == 1, "one trigger left")


def test_only_the_higher_priority_replica_acts(ops: tuple[Operator, Operator]) -> None:
    leader, standby = ops
    leader.secret("peered-db", {"url": "sqlite:///x"})
    leader.worker("peered")
    leader.wait(lambda: leader.get(f"{DEPLOYMENTS}/peered"), "the leader's Deployment")
    passes = standby.resync_passes()
    leader.wait(lambda: standby.resync_passes() > passes + 2, "the standby's resync passes")
    assert leader.metric("dbworker_operator_reconciles_total", 'kind="resync",result="ok"') > 0
    assert standby.metric("dbworker_operator_reconciles_total", 'result="ok"') == 0, "the standby acted"
    assert standby.process.poll() is None


def test_every_api_call_is_allowed_by_the_generated_rbac_rules(ops: tuple[Operator, Operator]) -> None:
    """Both ways: the leader uses every rule (add-on kinds included), no replica a rule it lacks."""
    rules = install.rbac_rules(scope="cluster", deletion_cost=False)
    for op in ops:
        assert not_allowed(op.api_calls(), rules) == set()
    assert never_called(ops[0].api_calls(), rules) == set()
