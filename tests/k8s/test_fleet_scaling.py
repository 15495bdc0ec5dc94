"""A fleet on one database: the pooler settings, the connection budget, scaling on in-flight plus
waiting work, and scaling from zero on the database's own count (pure parts)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml
from dbworker_operator import budget, conditions, kinds, spec
from dbworker_operator.builders import autoscaling, deployment, owned

from tests.k8s import keda, samples

KEDA = kinds.Capabilities(keda=True, pod_monitors=True, server_version=(1, 33))


def _built(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    wanted = owned.desired(spec.parse(body), KEDA)
    scaled = wanted[kinds.SCALED_OBJECT]
    assert scaled is not None
    return scaled, wanted[kinds.TRIGGER_AUTHENTICATION]


def test_pooler_settings_reach_both_containers_as_the_library_reads_them() -> None:
    dep = deployment.build(spec.parse(samples.scale_to_zero()), replicas=None)
    for container in (*dep["spec"]["template"]["spec"]["containers"], *dep["spec"]["template"]["spec"]["initContainers"]):
        env = {e["name"]: e for e in container["env"]}
        assert env["DBWORKER_LISTEN_URL"]["valueFrom"] == {"secretKeyRef": {"name": "mailer-db", "key": "direct-url"}}
        assert env["DBWORKER_TRANSACTION_POOLER"]["value"] == "true"
    plain = deployment.build(spec.parse(samples.minimal()), replicas=1)
    names = {e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not names & {"DBWORKER_LISTEN_URL", "DBWORKER_TRANSACTION_POOLER"}


def test_connections_per_pod_follow_the_readme_formula() -> None:
    parsed = spec.parse(samples.scale_to_zero())
    # 2 workers x 8 handler processes + the coordinator's pool (5) + one LISTEN connection.
    assert parsed.connections_per_pod == 16 + 5 + 1
    mysql = spec.parse(samples.scale_to_zero(kind="mysql"))
    assert mysql.connections_per_pod == 16 + 5, "MySQL has no LISTEN connection"
    pool = samples.scale_to_zero()
    pool["spec"]["database"]["poolConnections"] = 2
    assert spec.parse(pool).connections_per_pod == 16 + 2 + 1
    polling = samples.scale_to_zero()
    del polling["spec"]["database"]["listenUrlSecretRef"]
    assert spec.parse(polling).connections_per_pod == 16 + 5, "behind a pooler without a listen URL pods poll"


def test_keda_is_capped_to_what_fits_and_the_condition_gives_the_numbers() -> None:
    body = samples.scale_to_zero()  # maxConnections 200, 22 per pod, maxReplicas 20
    scaled, _ = _built(body)
    # 200 // 22 = 9 pods, one of them kept for a rollout's extra pod.
    assert scaled["spec"]["maxReplicaCount"] == 8 and scaled["spec"]["minReplicaCount"] == 0
    parsed = spec.parse(body)
    found = budget.of(parsed, autoscaled=True)
    assert found is not None and found.exceeded and found.needed == 22 * 21
    status, reason, message = conditions.connection_budget(found)
    assert (status, reason) == (True, "AutoscalingCapped")
    assert "462 of spec.database.maxConnections 200" in message and "at most 8 pod(s)" in message

    roomy = samples.scale_to_zero()
    roomy["spec"]["database"]["maxConnections"] = 22 * 21
    assert _built(roomy)[0]["spec"]["maxReplicaCount"] == 20
    fits = budget.of(spec.parse(roomy), autoscaled=True)
    assert fits is not None and conditions.connection_budget(fits)[:2] == (False, "WithinBudget")


def test_a_fixed_fleet_over_budget_is_reported_not_changed() -> None:
    body = samples.with_spec(samples.scale_to_zero(), autoscaling=None, replicas=12)
    parsed = spec.parse(body)
    dep = deployment.build(parsed, replicas=parsed.replicas)
    assert dep["spec"]["replicas"] == 12
    found = budget.of(parsed, autoscaled=False)
    assert found is not None
    status, reason, message = conditions.connection_budget(found)
    assert (status, reason) == (True, "BudgetExceeded") and "lower spec.replicas to 8" in message


def test_the_condition_is_in_the_status_and_warned_once() -> None:
    body = samples.with_spec(samples.scale_to_zero(), autoscaling=None, replicas=12)
    parsed = spec.parse(body)
    observed = conditions.observe(body, spec=parsed, capabilities=KEDA, problems=[], deployment=None, pods=[],
                                  backlog=None, now="2026-01-01T00:00:00Z")
    status = conditions.status(observed)
    [cond] = [c for c in status["conditions"] if c["type"] == conditions.CONNECTION_BUDGET]
    assert cond["status"] == "True" and cond["reason"] == "BudgetExceeded"
    events = conditions.events({}, status, [])
    assert [e.reason for e in events if e.type == "Warning"] == ["BudgetExceeded"]
    assert not [e for e in conditions.events(status, status, []) if e.reason == "BudgetExceeded"]
    plain = conditions.status(conditions.observe(samples.minimal(), spec=spec.parse(samples.minimal()),
                                                 capabilities=KEDA, problems=[], deployment=None, pods=[],
                                                 backlog=None, now="2026-01-01T00:00:00Z"))
    assert conditions.CONNECTION_BUDGET not in {c["type"] for c in plain["conditions"]}


@pytest.mark.parametrize(("changes", "field"), [
    ({"database": {"urlSecretRef": {"name": "a", "key": "b"}, "maxConnections": 100}}, "spec.workers"),
    ({"database": {"urlSecretRef": {"name": "a", "key": "b"}, "maxConnections": 100}, "workers": ["a", "b"],
      "concurrency": {"a": 2}}, "spec.concurrency.b"),
    ({"database": {"urlSecretRef": {"name": "a", "key": "b"}, "maxConnections": 20}, "workers": ["a"],
      "concurrency": {"a": 8}}, "raise it or lower spec.concurrency"),
    ({"database": {"urlSecretRef": {"name": "a", "key": "b"}, "listenUrlSecretRef": {"name": "a"}}},
     "spec.database.listenUrlSecretRef.key"),
    ({"autoscaling": {"minReplicas": 0, "maxReplicas": 3}}, "needs spec.autoscaling.database"),
    ({"workers": ["a", "b"], "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "database": {
        "type": "postgresql", "connectionKey": "keda", "sources": [{"worker": "a", "table": "t"}]}}},
     "add one for 'b'"),
    ({"autoscaling": {"maxReplicas": 3, "database": {
        "type": "postgresql", "connectionKey": "keda", "sources": [{"worker": "a", "table": "t.x"}]}}},
     r"sources\[0\]\.table"),
    ({"autoscaling": {"maxReplicas": 3, "database": {
        "type": "postgresql", "connectionKey": "keda",
        "sources": [{"worker": "a", "table": "t", "filter": "ready; DROP TABLE t"}]}}}, r"sources\[0\]\.filter"),
    ({"autoscaling": {"maxReplicas": 3, "database": {"type": "sqlite", "connectionKey": "keda",
                                                     "sources": [{"worker": "a", "table": "t"}]}}},
     "use postgresql or mysql"),
    ({"autoscaling": {"maxReplicas": 3, "targetPerSlot": 0}}, "spec.autoscaling.targetPerSlot"),
])
def test_bad_fleet_settings_name_the_field_and_the_fix(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(spec.SpecError, match=field):
        spec.parse(samples.with_spec(samples.minimal(), **changes))


def test_busy_fleet_signal_counts_work_in_flight_per_slot() -> None:
    scaled, _ = _built(samples.scale_to_zero())
    work = scaled["spec"]["triggers"][0]
    assert work["type"] == "prometheus" and work["metricType"] == "AverageValue"
    query = work["metadata"]["query"]
    # Running handlers count as much as waiting items: all slots busy with nothing waiting
    # is the current fleet's worth, so the HPA keeps it.
    assert "sum(dbworker_handlers_active{" in query and "max by (worker) (dbworker_backlog{" in query
    assert "sum(dbworker_handler_slots{" in query and "count by (instance)" in query
    assert query.endswith("or vector(0)")
    assert query.count('app_kubernetes_io_instance="mailer"') == 4 and "pod=~" not in query
    assert work["metadata"]["threshold"] == "1"


def test_scale_in_is_paced_by_the_hpa_behavior_default_or_the_spec() -> None:
    scaled, _ = _built(samples.scale_to_zero())
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == autoscaling.DEFAULT_BEHAVIOR and "cooldownPeriod" not in scaled["spec"]
    body = samples.scale_to_zero()
    mine = {"scaleDown": {"stabilizationWindowSeconds": 60, "policies": [{"type": "Percent", "value": 50,
                                                                          "periodSeconds": 30}]}}
    body["spec"]["autoscaling"]["behavior"] = mine
    assert _built(body)[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == mine


@pytest.mark.parametrize(("kind", "param", "target", "activation"), [
    ("postgresql", "connection", "targetQueryValue", "activationTargetQueryValue"),
    ("mysql", "connectionString", "queryValue", "activationQueryValue")])
def test_scale_from_zero_asks_the_database_with_the_workers_secret(kind: str, param: str, target: str,
                                                                    activation: str) -> None:
    scaled, auth = _built(samples.scale_to_zero(kind=kind))
    assert auth is not None
    keda.validate(scaled, "1.33", auths={auth["metadata"]["name"]: auth})
    keda.validate(auth, "1.33")
    assert auth["spec"]["secretTargetRef"] == [{"parameter": param, "name": "mailer-db", "key": "keda"}]
    database = scaled["spec"]["triggers"][1]
    assert database["type"] == kind and database["authenticationRef"] == {"name": auth["metadata"]["name"]}
    # 16 slots per pod at 1 item per slot; one claimable item wakes the fleet.
    assert database["metadata"][target] == "16" and database["metadata"][activation] == "0"
    query = database["metadata"]["query"]
    q = "`" if kind == "mysql" else '"'
    for part in (f"{q}outbox{q}", f"{q}emails_work{q}", f"{q}images{q}", f"{q}image_id{q}", "AND (uploaded)",
                 f"{q}thumbs_work{q}"):
        assert part in query, part
    for secret in ("password", "postgresql://", "@"):
        assert secret not in str(scaled)


def test_without_a_database_trigger_there_is_no_trigger_authentication() -> None:
    wanted = owned.desired(spec.parse(samples.full()), KEDA)
    assert wanted[kinds.TRIGGER_AUTHENTICATION] is None
    assert len((wanted[kinds.SCALED_OBJECT] or {})["spec"]["triggers"]) == 1
    assert kinds.TRIGGER_AUTHENTICATION not in owned.desired(spec.parse(samples.full()), kinds.Capabilities())


PROMTOOL = shutil.which("promtool")


def _pod_series(instance: str, *, worker: str, active: int, slots: int, backlog: int,
                name: str = "mailer") -> list[dict[str, str]]:
    labels_ = (f'namespace="apps",app_kubernetes_io_name="dbworker",app_kubernetes_io_instance="{name}",'
               f'instance="{instance}",worker="{worker}"')
    return [{"series": f"dbworker_handlers_active{{{labels_}}}", "values": f"{active}x10"},
            {"series": f"dbworker_handler_slots{{{labels_}}}", "values": f"{slots}x10"},
            {"series": f"dbworker_backlog{{{labels_}}}", "values": f"{backlog}x10"}]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_prometheus_evaluates_the_work_signal_as_pods_worth_of_slots(tmp_path: Any) -> None:
    """promtool evaluates the ScaledObject's query on synthetic series. KEDA's AverageValue makes
    the HPA want ceil(value / threshold) pods: a busy fleet with nothing waiting keeps them all."""
    query = autoscaling.work_query(spec.parse(samples.scale_to_zero()))
    pods = [f"10.0.0.{i}:9100" for i in (1, 2, 3)]

    def fleet(active: int, backlog: int) -> list[dict[str, str]]:
        # Two workers of 8 slots per pod; every pod reports the same database-wide backlog.
        return [s for pod in pods for worker in ("emails", "thumbs")
                for s in _pod_series(pod, worker=worker, active=active, slots=8,
                                     backlog=backlog if worker == "emails" else 0)]

    def case(series: list[dict[str, str]], value: float) -> dict[str, Any]:
        return {"interval": "1m", "input_series": series,
                "promql_expr_test": [{"expr": query, "eval_time": "5m",
                                      "exp_samples": [{"labels": "{}", "value": value}]}]}

    other = _pod_series("10.0.9.9:9100", worker="emails", active=8, slots=8, backlog=500, name="mailer2")
    tests = [
        case(fleet(active=8, backlog=0), 3),  # every slot busy, nothing waiting: 3 pods' worth
        case(fleet(active=8, backlog=32), 5),  # 48 running + 32 waiting over 16 slots a pod
        case(fleet(active=2, backlog=0) + other, 0.75),  # a quiet fleet; another Worker's series ignored
        case(other, 0),  # no pod of this Worker: 0, the database trigger wakes it
    ]
    rules = tmp_path / "none.yaml"
    rules.write_text("groups: []\n")
    test_file = tmp_path / "work-signal-test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    result = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_new_deployment_starts_within_the_budget() -> None:
    body = samples.scale_to_zero()
    body["spec"]["autoscaling"]["minReplicas"] = 12  # more than the 8 that fit
    parsed = spec.parse(body)
    assert owned.initial_fields(kinds.DEPLOYMENT, parsed, KEDA) == {"spec": {"replicas": 8}}
    scaled = autoscaling.build(parsed)
    assert scaled is not None and (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (8, 8)
