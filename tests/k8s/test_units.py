"""The operator's pure parts: spec parsing, conditions, scraping, deletion cost, drift, peering, config."""

from __future__ import annotations

from typing import Any

import pytest
from dbworker_operator import (
    conditions,
    config,
    deletion_cost,
    drift,
    kinds,
    labels,
    leadership,
    metrics,
    problems,
    redact,
    scrape,
    spec,
)
from prometheus_client import CollectorRegistry

from tests.k8s import samples

# ---- spec --------------------------------------------------------------------------------


def test_minimal_spec_gets_every_default() -> None:
    parsed = spec.parse(samples.minimal())
    assert (parsed.name, parsed.namespace, parsed.replicas, parsed.drain_seconds) == ("imgdedup", "apps", 1, 25)
    assert parsed.env_name == "DATABASE_URL" and parsed.migrate is True
    assert parsed.metrics_port == 9100 and parsed.pod_monitor is False
    assert parsed.workers == () and parsed.autoscaling is None and parsed.disruption_budget is None


def test_full_spec_is_read() -> None:
    parsed = spec.parse(samples.full())
    assert parsed.workers == ("hash", "compare")
    assert parsed.concurrency == (("compare", 2), ("hash", 4))
    assert parsed.autoscaling == spec.Autoscaling(2, 10, "http://prometheus-operated.monitoring.svc:9090",
                                                  target_per_slot=0.8)
    assert parsed.poll_seconds == 0.5 and parsed.lease_seconds == 30.0


@pytest.mark.parametrize(("changes", "field"), [
    ({"app": "nocolon"}, "spec.app"),
    ({"image": ""}, "spec.image"),
    ({"replicas": -1}, "spec.replicas"),
    ({"replicas": True}, "spec.replicas"),
    ({"workers": ["ok", "Bad"]}, "spec.workers[1]"),
    ({"concurrency": {"hash": 0}}, "spec.concurrency.hash"),
    ({"concurrency": {"Hash": 1}, "workers": None}, "spec.concurrency.Hash"),
    ({"concurrency": {"resize": 1}}, "spec.concurrency.resize"),
    ({"pollSeconds": 3, "maxPollSeconds": 1}, "spec.maxPollSeconds"),
    ({"leaseSeconds": 0}, "spec.leaseSeconds"),
    ({"disruptionBudget": {}}, "spec.disruptionBudget"),
    ({"autoscaling": {"minReplicas": 4, "maxReplicas": 2}}, "spec.autoscaling.minReplicas"),
    ({"autoscaling": {"minReplicas": 1}}, "spec.autoscaling.maxReplicas"),
    ({"podLabels": {"app.kubernetes.io/name": "x"}}, "spec.podLabels.app.kubernetes.io/name"),
    ({"nodeSelector": {"a": 1}}, "spec.nodeSelector.a"),
    ({"database": {"urlSecretRef": {"name": "db"}}}, "spec.database.urlSecretRef.key"),
])
def test_spec_errors_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(spec.SpecError) as caught:
        spec.parse(samples.with_spec(samples.full(), **changes))
    assert field in str(caught.value)


def test_missing_spec_is_an_error() -> None:
    with pytest.raises(spec.SpecError, match="spec is required"):
        spec.parse({"metadata": {"name": "x"}})


# ---- conditions --------------------------------------------------------------------------


def _pod(name: str, *, waiting: str = "", code: int | None = None, message: str = "",
         ready: bool = False, init: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "migrate" if init else "worker", "ready": ready,
                              "state": {"waiting": {"reason": waiting, "message": "detail"}} if waiting
                              else {"running": {}}}
    if code is not None:
        status["lastState"] = {"terminated": {"exitCode": code, "message": message}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "status": {"phase": "Running", key: [status]}}


def test_pod_problems_name_the_fix() -> None:
    found = problems.pod_problems([
        _pod("a", waiting="ImagePullBackOff"),
        _pod("b", waiting="CrashLoopBackOff", code=2,
             message="dbworker[UnknownWorker]: unknown worker 'resize' (--worker); known workers: hash, compare\n"),
        _pod("c", waiting="CrashLoopBackOff", code=3,
             message="dbworker[DatabaseUnreachable]: database unreachable: postgresql://app:hunter2@db/app"),
        _pod("d", waiting="CreateContainerConfigError"),
        _pod("e", waiting="CrashLoopBackOff", code=1, message="dbworker[Unexpected]: unexpected error: boom"),
        _pod("f", code=2, message="dbworker[BadInput]: cannot import 'x'", init=True, waiting="CrashLoopBackOff"),
    ], image="img:1")
    reasons = [p.reason for p in found]
    assert reasons == ["ImagePullFailed", "UnknownWorker", "DatabaseUnreachable", "ContainerConfigError",
                       "CrashLoopBackOff", "BadConfiguration"]
    assert "spec.image" in found[0].message
    assert "spec.workers" in found[1].message and "known workers: hash, compare" in found[1].message
    # A tokened line reads as the command's stderr line: the token is the operator's, not the user's.
    assert "exited with code 2: dbworker: unknown worker 'resize'" in found[1].message
    assert "hunter2" not in found[2].message and "app:***@db" in found[2].message
    assert "last exit code 1): dbworker: unexpected error: boom" in found[4].message
    assert "spec.app" in found[5].message and "dbworker: cannot import 'x'" in found[5].message


def test_unknown_worker_is_matched_by_token_not_by_text() -> None:
    [by_token] = problems.pod_problems(
        [_pod("a", waiting="CrashLoopBackOff", code=2, message="dbworker[UnknownWorker]: no such name 'x'")],
        image="i")
    [by_text] = problems.pod_problems(
        [_pod("a", waiting="CrashLoopBackOff", code=2, message="dbworker: unknown worker 'x'")], image="i")
    assert (by_token.reason, by_text.reason) == ("UnknownWorker", "BadConfiguration")


@pytest.mark.parametrize(("code", "message", "reason"), [
    (2, "dbworker: cannot import 'x'", "BadConfiguration"),
    (3, "dbworker: database unreachable: timeout", "DatabaseUnreachable"),
    (3, "", "DatabaseUnreachable"),
    (1, "Traceback (most recent call last):\n  ...\nKeyError: 'x'", "CrashLoopBackOff"),
    (2, "dbworker[SomethingNew]: a reason this operator does not know", "BadConfiguration"),
])
def test_a_line_without_a_known_token_falls_back_on_the_exit_code(code: int, message: str, reason: str) -> None:
    [found] = problems.pod_problems([_pod("a", waiting="CrashLoopBackOff", code=code, message=message)],
                                      image="i")
    assert found.reason == reason


def test_the_token_line_is_found_in_a_log_tail() -> None:
    tail = ('{"level": "INFO", "message": "starting"}\n'
            "dbworker[DatabaseUnreachable]: database unreachable: connection refused\n")
    last = problems.termination({"exitCode": 3, "message": tail})
    assert last == problems.Termination(3, "DatabaseUnreachable", "dbworker: database unreachable: connection refused")
    plain = problems.termination({"exitCode": 2, "message": " dbworker: bad --concurrency \n"})
    assert plain == problems.Termination(2, None, "dbworker: bad --concurrency")


def test_the_operator_reads_every_reason_the_command_writes() -> None:
    """The contract between the pods and the operator: the `dbworker` command's own termination line."""
    termination = pytest.importorskip("dbworker.pod.termination")
    assert set(termination.REASONS) == problems.TOKENS
    line = termination.termination_line("unknown worker 'resize' (--worker)", termination.UNKNOWN_WORKER)
    last = problems.termination({"exitCode": termination.EXIT_USAGE, "message": line + "\n"})
    assert (last.token, last.message) == ("UnknownWorker", termination.stderr_line("unknown worker 'resize' (--worker)"))


def test_pod_messages_never_carry_passwords() -> None:
    tail = ('{"level": "ERROR", "message": "connect failed: postgresql://app:p@ss@db.media.svc/app"}\n'
            "psycopg.OperationalError: connection failed: password=hunter2 host=db\n"
            "dbworker[DatabaseUnreachable]: database unreachable: mysql+pymysql://root:a@b:c@db:3306/app")
    [found] = problems.pod_problems([_pod("a", waiting="CrashLoopBackOff", code=3, message=tail)], image="i")
    assert "***@db:3306/app" in found.message and "a@b" not in found.message and "b:c" not in found.message
    masked = redact.message(tail)
    for secret in ("hunter2", "p@ss", "ss@db", "a@b:c"):
        assert secret not in masked, secret
    assert "password=***" in masked and "app:***@db.media.svc/app" in masked
    waiting = _pod("b", waiting="CreateContainerConfigError")
    waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = "bad env password=hunter2"
    [config_error] = problems.pod_problems([waiting], image="i")
    assert "hunter2" not in config_error.message and "password=***" in config_error.message


def test_recovered_containers_are_not_problems() -> None:
    assert problems.pod_problems([_pod("a", code=3, message="gone", ready=True)], image="x") == []


def _observed(**kw: Any) -> conditions.Observed:
    base: dict[str, Any] = {"generation": 2, "desired_replicas": 2, "selector": labels.selector_string("w"),
                            "now": "2026-01-01T00:00:10Z"}
    base.update(kw)
    return conditions.Observed(**base)


def _deployment(ready: int, *, replicas: int = 2, updated: int | None = None) -> dict[str, Any]:
    return {"metadata": {"generation": 3}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": 3, "replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": replicas if updated is None else updated, "availableReplicas": ready}}


def _conds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_status_ready_progressing_degraded() -> None:
    ready = conditions.status(_observed(deployment=_deployment(2), backlog=7))
    assert _conds(ready) == {"Ready": ("True", "AllPodsReady"), "Progressing": ("False", "RolledOut"),
                             "Degraded": ("False", "AsExpected")}
    assert (ready["readyReplicas"], ready["backlog"], ready["observedGeneration"]) == (2, 7, 2)
    assert ready["selector"] == "app.kubernetes.io/instance=w,app.kubernetes.io/name=dbworker"
    rolling = conditions.status(_observed(deployment=_deployment(1, updated=1)))
    assert _conds(rolling)["Progressing"] == ("True", "RollingOut") and _conds(rolling)["Ready"][0] == "False"
    creating = conditions.status(_observed())
    assert _conds(creating)["Progressing"] == ("True", "Creating")
    bad = conditions.status(_observed(deployment=_deployment(2),
                                      problems=[problems.Problem("SecretNotFound", "create it")]))
    assert _conds(bad)["Degraded"] == ("True", "SecretNotFound") and _conds(bad)["Ready"] == ("False", "SecretNotFound")
    zero = conditions.status(_observed(desired_replicas=0, deployment=_deployment(0, replicas=0)))
    assert _conds(zero)["Ready"] == ("True", "ScaledToZero")
    scaling = conditions.status(_observed(autoscaling_requested=True,
                                          autoscaling=problems.Problem("KEDANotInstalled", "install KEDA")))
    assert _conds(scaling)["AutoscalingActive"] == ("False", "KEDANotInstalled")


def test_transition_time_kept_while_status_holds() -> None:
    first = conditions.status(_observed(deployment=_deployment(2), now="2026-01-01T00:00:00Z"))
    again = conditions.status(_observed(deployment=_deployment(2), previous=first["conditions"],
                                        now="2026-01-01T00:05:00Z"))
    assert all(c["lastTransitionTime"] == "2026-01-01T00:00:00Z" for c in again["conditions"])
    assert not conditions.changed(first, again)
    flipped = conditions.status(_observed(deployment=_deployment(1), previous=first["conditions"],
                                          now="2026-01-01T00:06:00Z"))
    ready = next(c for c in flipped["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:06:00Z"


def test_redact_hides_passwords_and_bounds_length() -> None:
    assert redact.message("x mysql+pymysql://root:s3cret@db:3306/app y") == "x mysql+pymysql://root:***@db:3306/app y"
    assert redact.message("password=hunter2") == "password=***"
    assert redact.message("  postgresql://app:p@ss@db/app \n") == "postgresql://app:***@db/app"
    assert len(redact.message("a" * 2000)) == redact.MESSAGE_LIMIT == 500
    # Masked before it is cut: a URL cut at its password is never left half-masked.
    long = "x" * 480 + " postgresql://app:hunter2@db/app"
    assert "hunter" not in redact.message(long) and redact.message(long).endswith("...")


def test_apply_failures_are_masked() -> None:
    problem = problems.apply_failed(kinds.DEPLOYMENT, "w", "env value postgresql://app:hunter2@db/app invalid")
    assert problem.reason == "ApplyFailed" and "hunter2" not in problem.message
    assert problem.message.startswith("the API server rejected Deployment w: ")


def test_secret_problems_name_the_fix() -> None:
    parsed = spec.parse(samples.minimal())
    missing = problems.secret_problem(parsed, None)
    assert missing is not None and missing.reason == "SecretNotFound" and "create secret generic imgdedup-db" in missing.message
    no_key = problems.secret_problem(parsed, {"data": {"other": "eA=="}})
    assert no_key is not None and no_key.reason == "SecretKeyMissing" and "spec.database.urlSecretRef.key" in no_key.message
    assert problems.secret_problem(parsed, {"data": {"url": "eA=="}}) is None
    assert problems.secret_problem(parsed, {"stringData": {"url": "x"}}) is None


def test_observe_decides_the_replicas_and_the_add_on_conditions() -> None:
    body = samples.with_spec(samples.minimal(), replicas=3, metrics={"podMonitor": True},
                             autoscaling={"minReplicas": 1, "maxReplicas": 5})
    body["status"] = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "then"}]}
    parsed = spec.parse(body)
    keda_dep = {"spec": {"replicas": 4}}
    bare = conditions.observe(body, spec=parsed, capabilities=kinds.Capabilities(), problems=(),
                              deployment=keda_dep, pods=(), backlog=None, now="now")
    assert bare.desired_replicas == 3  # no KEDA: the spec's count
    assert bare.autoscaling is not None and bare.autoscaling.reason == "KEDANotInstalled"
    assert bare.monitoring is not None and bare.monitoring.reason == "PrometheusOperatorNotInstalled"
    assert (bare.generation, bare.image, bare.previous) == (1, "registry.example/imgdedup:1.0",
                                                            body["status"]["conditions"])
    assert bare.selector == labels.selector_string("imgdedup")
    everything = kinds.Capabilities(keda=True, pod_monitors=True)
    scaled = conditions.observe(body, spec=parsed, capabilities=everything, problems=(), deployment=keda_dep,
                                pods=(), backlog=None, now="now")
    assert scaled.desired_replicas == 4 and scaled.autoscaling is None and scaled.monitoring is None
    assert scaled.autoscaling_requested and scaled.monitoring_requested
    unparsed = conditions.observe(body, spec=None, capabilities=everything,
                                  problems=[problems.invalid_spec(spec.SpecError("spec.app: bad"))],
                                  deployment=keda_dep, pods=(), backlog=None, now="now")
    assert unparsed.desired_replicas == 4 and not unparsed.autoscaling_requested and unparsed.image == ""
    assert unparsed.problems[0] == problems.Problem("InvalidSpec", "spec.app: bad")
    assert conditions.desired_replicas(None, everything, None) == 0


def test_status_patch_removes_a_backlog_no_pod_reported() -> None:
    previous = conditions.status(_observed(deployment=_deployment(2), backlog=7))
    assert conditions.status_patch(previous, previous) is None
    assert conditions.status_patch({**previous, "kopf": {"x": 1}}, previous) is None
    silent = conditions.status(_observed(deployment=_deployment(2)))
    assert conditions.status_patch(previous, silent) == {**silent, "backlog": None}
    assert conditions.status_patch(silent, silent) is None


def test_events_say_what_changed_once() -> None:
    fine = conditions.status(_observed(deployment=_deployment(2)))
    bad = conditions.status(_observed(deployment=_deployment(2),
                                      problems=[problems.Problem("SecretNotFound", "create it")]))
    assert conditions.events(fine, fine, ["Created Deployment w"]) == [
        conditions.Event("Normal", "Applied", "Created Deployment w")]
    assert conditions.events(fine, bad, []) == [conditions.Event("Warning", "SecretNotFound", "create it")]
    assert conditions.events(bad, bad, []) == []
    assert conditions.events(bad, fine, []) == [
        conditions.Event("Normal", "Recovered", "no longer degraded (SecretNotFound)")]
    assert conditions.degraded(bad) is not None and conditions.degraded(fine) is None


# ---- scraping and deletion cost ------------------------------------------------------------

METRICS_TEXT = """\
# HELP dbworker_backlog Items claimable now.
# TYPE dbworker_backlog gauge
dbworker_backlog{worker="hash"} 12.0
dbworker_backlog{worker="compare"} 3.0
# HELP dbworker_handlers_active Handlers running now.
# TYPE dbworker_handlers_active gauge
dbworker_handlers_active{worker="hash"} 2.0
dbworker_handlers_active{worker="compare"} 1.0
# HELP dbworker_claims_total Claims.
# TYPE dbworker_claims_total counter
dbworker_claims_total{worker="hash"} 40.0
"""


def test_parse_reads_backlog_and_active_handlers() -> None:
    report = scrape.parse(METRICS_TEXT)
    assert report.backlog == {"hash": 12.0, "compare": 3.0}
    assert report.handlers_active == 3.0


def test_backlog_is_max_over_pods_summed_over_workers() -> None:
    a = scrape.PodMetrics(backlog={"hash": 12.0, "compare": 3.0})
    b = scrape.PodMetrics(backlog={"hash": 11.0, "compare": 4.0})
    assert scrape.total_backlog([a, b]) == 16


def test_pod_url_only_for_running_pods_with_an_ip() -> None:
    assert scrape.pod_url({"status": {"phase": "Running", "podIP": "10.0.0.7"}}, 9100) == "http://10.0.0.7:9100/metrics"
    assert scrape.pod_url({"status": {"phase": "Running", "podIP": "fd00::7"}}, 9100) == "http://[fd00::7]:9100/metrics"
    assert scrape.pod_url({"status": {"phase": "Pending"}}, 9100) is None


def test_deletion_cost_patch_only_when_it_changes() -> None:
    pod = {"metadata": {"annotations": {labels.DELETION_COST: "3"}}}
    assert deletion_cost.patch_for(pod, 3.0) is None
    assert deletion_cost.patch_for(pod, 0) == {"metadata": {"annotations": {labels.DELETION_COST: "0"}}}
    assert deletion_cost.cost(-1) == "0"


# ---- drift ---------------------------------------------------------------------------------


def test_contains_ignores_server_defaults_but_not_our_fields() -> None:
    wanted = {"spec": {"containers": [{"name": "w", "image": "a"}]}}
    defaulted = {"spec": {"containers": [{"name": "w", "image": "a", "imagePullPolicy": "Always"}],
                          "dnsPolicy": "ClusterFirst"}}
    assert drift.contains(defaulted, wanted)
    assert not drift.contains({"spec": {"containers": [{"name": "w", "image": "b"}]}}, wanted)
    assert not drift.contains({"spec": {"containers": []}}, wanted)


def test_restore_patch_removes_fields_we_no_longer_set() -> None:
    before = drift.annotate({"metadata": {"name": "x"}, "spec": {"nodeSelector": {"a": "b"}, "replicas": 1}})
    actual = {**before, "status": {"replicas": 1}}
    after = drift.annotate({"metadata": {"name": "x"}, "spec": {"replicas": 1}})
    patch = drift.restore_patch(actual, after)
    assert patch is not None and patch["spec"]["nodeSelector"] is None
    assert drift.restore_patch(actual, before) is None


def test_replicas_left_to_an_autoscaler_are_never_removed() -> None:
    before = drift.annotate({"metadata": {"name": "x"}, "spec": {"replicas": 2, "paused": False}})
    after = drift.annotate({"metadata": {"name": "x"}, "spec": {"paused": True}})
    patch = drift.restore_patch({**before, "spec": {"replicas": 5, "paused": False}}, after)
    assert patch is not None and "replicas" not in patch["spec"]
    assert drift.merged({"spec": {"a": 1}}, {"spec": {"replicas": 2}}) == {"spec": {"a": 1, "replicas": 2}}


# ---- peering, config, metrics -----------------------------------------------------------------


def test_may_act_follows_kopf_peering_rule() -> None:
    now = "2026-01-01T00:00:00+00:00"
    import datetime
    at = datetime.datetime.fromisoformat(now) + datetime.timedelta(seconds=10)
    alive = {"priority": 50, "lifetime": 60, "lastseen": now}
    dead = {"priority": 50, "lifetime": 5, "lastseen": now}
    assert leadership.may_act(None, identity="me", priority=1, now=at)
    assert not leadership.may_act({"status": {"other": alive}}, identity="me", priority=10, now=at)
    assert leadership.may_act({"status": {"other": alive}}, identity="me", priority=100, now=at)
    assert leadership.may_act({"status": {"other": dead}}, identity="me", priority=10, now=at)
    assert leadership.may_act({"status": {"me": alive}}, identity="me", priority=10, now=at)


def test_config_defaults_and_errors() -> None:
    cfg = config.from_env({})
    assert cfg.clusterwide and cfg.liveness_port == 8080 and cfg.metrics_port == 9090
    assert cfg.peering == "dbworker-operator" and cfg.log_level == "INFO" and cfg.standalone is False
    cfg = config.from_env({"DBWORKER_OPERATOR_NAMESPACES": "a, b,", "DBWORKER_OPERATOR_PRIORITY": "7"})
    assert cfg.namespaces == ("a", "b") and cfg.priority == 7 and not cfg.clusterwide
    for env, name in [({"DBWORKER_OPERATOR_LIVENESS_PORT": "http"}, "DBWORKER_OPERATOR_LIVENESS_PORT"),
                      ({"DBWORKER_OPERATOR_METRICS_PORT": "70000"}, "DBWORKER_OPERATOR_METRICS_PORT"),
                      ({"DBWORKER_OPERATOR_LOG_LEVEL": "loud"}, "DBWORKER_OPERATOR_LOG_LEVEL"),
                      ({"DBWORKER_OPERATOR_RESYNC_SECONDS": "0"}, "DBWORKER_OPERATOR_RESYNC_SECONDS")]:
        with pytest.raises(config.ConfigError, match=name):
            config.from_env(env)


def test_operator_metrics_start_at_zero_on_their_own_registry() -> None:
    registry = CollectorRegistry()
    m = metrics.build(registry)
    assert registry.get_sample_value("dbworker_operator_reconciles_total", {"kind": "resync", "result": "error"}) == 0
    m.reconciles.labels("create", "ok").inc()
    assert registry.get_sample_value("dbworker_operator_reconciles_total", {"kind": "create", "result": "ok"}) == 1


def test_parse_reads_what_the_dbworker_command_actually_exposes() -> None:
    """The contract between the pods and the operator: the library's own exposition."""
    from prometheus_client import generate_latest

    library_metrics = pytest.importorskip("dbworker.pod.metrics")
    registry = CollectorRegistry()
    exposed = library_metrics.WorkerMetrics(registry, version="test")
    exposed.touch(["hash", "compare"])
    exposed.backlog.labels("hash").set(12)
    exposed.handlers_active.labels("hash").set(2)
    exposed.handlers_active.labels("compare").set(1)
    report = scrape.parse(generate_latest(registry).decode())
    assert report.backlog == {"hash": 12.0, "compare": 0.0}
    assert report.handlers_active == 3.0


def test_bad_operator_setting_exits_2_with_one_line_naming_it() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "DBWORKER_OPERATOR_METRICS_PORT": "lots"}
    done = subprocess.run([sys.executable, "-m", "dbworker_operator"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "dbworker-operator: DBWORKER_OPERATOR_METRICS_PORT='lots' is not an integer; set it to a number from 0 to 65535"]


# ---- hardening: what a cluster administrator checks ------------------------------------------


def _waiting(name: str, reason: str, message: str) -> dict[str, Any]:
    pod = _pod(name, waiting=reason)
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = message
    return pod


def test_passwords_never_reach_status_or_events() -> None:
    """One masker (dbworker.redact) between pod texts and what the Worker shows: `password=hunter2`
    and a password holding an `@` are masked in the status conditions and in the Events."""
    tail = ("psycopg.OperationalError: connection failed: password=hunter2 host=db\n"
            "dbworker[DatabaseUnreachable]: cannot connect to postgresql://app:p@ss@w0rd@db.media.svc/app")
    pods = [_pod("a", waiting="CrashLoopBackOff", code=3, message=tail),
            _waiting("b", "CreateContainerConfigError", "bad env password=hunter2 mysql://u:x@y@db/app")]
    status = conditions.status(_observed(deployment=_deployment(2), pods=pods))
    events = conditions.events({}, status, [])
    shown = repr(status) + repr(events)
    assert events and events[0].type == "Warning"
    for secret in ("hunter2", "p@ss", "ss@w0rd", "w0rd@db", "x@y"):
        assert secret not in shown, secret
    assert "postgresql://app:***@db.media.svc/app" in shown


def test_status_fits_the_crds_condition_schema() -> None:
    """metav1.Condition's required fields, lengths and patterns, for every condition the operator writes."""
    import jsonschema
    from dbworker_operator import crd, rules

    body = samples.with_spec(samples.full(), replicas=1, disruptionBudget={"minAvailable": 1})
    parsed = spec.parse(body)
    observed = conditions.observe(body, spec=parsed, capabilities=kinds.Capabilities(), problems=[
        problems.Problem("ApplyFailed", "x" * 40_000)], deployment=None, pods=(), backlog=3, now="2026-01-01T00:00:00Z")
    status = conditions.status(observed)
    assert {c["type"] for c in status["conditions"]} == {
        "Degraded", "Ready", "Progressing", "AutoscalingActive", "PodMonitorActive", "DrainBlocked"}
    jsonschema.Draft4Validator(crd.status_schema()).validate(status)
    assert all(len(c["message"]) <= rules.CONDITION_MESSAGE_MAX for c in status["conditions"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(crd.status_schema()).validate(
            {"conditions": [{"type": "Ready", "status": "True"}]})


def test_desired_replicas_is_what_keda_wants_while_it_scales() -> None:
    body = samples.with_spec(samples.minimal(), replicas=2, autoscaling={"minReplicas": 1, "maxReplicas": 9})
    parsed = spec.parse(body)
    scaled = conditions.observe(body, spec=parsed, capabilities=kinds.Capabilities(keda=True), problems=(),
                                deployment={"spec": {"replicas": 7}}, pods=(), backlog=None, now="now")
    assert conditions.status(scaled)["desiredReplicas"] == 7
    plain = conditions.observe(body, spec=parsed, capabilities=kinds.Capabilities(), problems=(),
                               deployment={"spec": {"replicas": 7}}, pods=(), backlog=None, now="now")
    assert conditions.status(plain)["desiredReplicas"] == 2


@pytest.mark.parametrize(("budget", "desired", "allowed"), [
    ({"minAvailable": 1}, 1, 0), ({"minAvailable": 1}, 3, 2), ({"minAvailable": "100%"}, 4, 0),
    ({"minAvailable": "50%"}, 3, 1), ({"maxUnavailable": 0}, 3, 0), ({"maxUnavailable": "0%"}, 3, 0),
    ({"maxUnavailable": "10%"}, 3, 1), ({"maxUnavailable": 1}, 1, 1), ({"minAvailable": 0}, 2, 2),
])
def test_evictions_allowed_as_the_disruption_controller_counts(budget: dict[str, Any], desired: int,
                                                               allowed: int) -> None:
    parsed = spec.parse(samples.with_spec(samples.minimal(), disruptionBudget=budget))
    assert parsed.disruption_budget is not None
    assert conditions.evictions_allowed(parsed.disruption_budget, desired) == allowed
    assert (conditions.drain_blocked(parsed.disruption_budget, desired) is not None) is (allowed == 0)


def test_a_budget_that_blocks_every_drain_is_a_condition_and_one_warning() -> None:
    body = samples.with_spec(samples.minimal(), replicas=1, disruptionBudget={"minAvailable": 1})
    observed = conditions.observe(body, spec=spec.parse(body), capabilities=kinds.Capabilities(), problems=(),
                                  deployment=_deployment(1, replicas=1), pods=(), backlog=None, now="now")
    status = conditions.status(observed)
    blocked = next(c for c in status["conditions"] if c["type"] == "DrainBlocked")
    assert (blocked["status"], blocked["reason"]) == ("True", "BudgetAllowsNoEviction")
    assert "minAvailable 1 with 1 desired pod" in blocked["message"] and "maxUnavailable: 1" in blocked["message"]
    assert _conds(status)["Ready"] == ("True", "AllPodsReady"), "the pods themselves are fine"
    warnings = conditions.events({}, status, [])
    assert [e.reason for e in warnings] == ["BudgetAllowsNoEviction"]
    assert conditions.events(status, status, []) == []
    wider = samples.with_spec(body, replicas=3)
    observed = conditions.observe(wider, spec=spec.parse(wider), capabilities=kinds.Capabilities(), problems=(),
                                  deployment=None, pods=(), backlog=None, now="now")
    assert _conds(conditions.status(observed))["DrainBlocked"] == ("False", "EvictionsAllowed")


def test_pod_monitor_condition_says_what_the_operator_cannot_see() -> None:
    body = samples.with_spec(samples.minimal(), metrics={"podMonitor": True, "podMonitorLabels": {"release": "kps"}})
    observed = conditions.observe(body, spec=spec.parse(body), capabilities=kinds.Capabilities(pod_monitors=True),
                                  problems=(), deployment=None, pods=(), backlog=None, now="now")
    monitor = next(c for c in conditions.status(observed)["conditions"] if c["type"] == "PodMonitorActive")
    assert monitor["status"] == "True" and "release=kps" in monitor["message"]
    assert "cannot see whether a Prometheus selects it" in monitor["message"]


def test_a_missing_secret_or_key_is_read_from_the_pods_when_secrets_are_not_readable() -> None:
    """The kubelet's CreateContainerConfigError texts give the same reasons the Secret check would."""
    ref = spec.SecretRef("imgdedup-db", "url")
    gone = _waiting("a", "CreateContainerConfigError", 'secret "imgdedup-db" not found')
    [problem] = problems.pod_problems([gone], image="i", secret=ref, namespace="apps")
    assert problem == problems.secret_not_found(ref, "apps")
    keyless = _waiting("a", "CreateContainerConfigError", "couldn't find key url in Secret apps/imgdedup-db")
    [problem] = problems.pod_problems([keyless], image="i", secret=ref, namespace="apps")
    assert problem.reason == "SecretKeyMissing" and "spec.database.urlSecretRef.key" in problem.message
    other = _waiting("a", "CreateContainerConfigError", 'secret "user-env" not found')  # an envFrom of the user's
    [problem] = problems.pod_problems([other], image="i", secret=ref, namespace="apps")
    assert problem.reason == "ContainerConfigError" and "runAsUser" in problem.message


def test_server_version_decides_version_gated_fields() -> None:
    assert kinds.parse_server_version({"major": "1", "minor": "27+"}) == (1, 27)
    assert kinds.parse_server_version({"gitVersion": "v1.30"}) is None
    assert kinds.parse_server_version(None) is None
    assert not kinds.Capabilities().unhealthy_pod_eviction_policy
    assert not kinds.Capabilities(server_version=(1, 26)).unhealthy_pod_eviction_policy
    assert kinds.Capabilities(server_version=(1, 27)).unhealthy_pod_eviction_policy


def test_config_of_secret_reads_pod_monitor_labels_and_deletion_cost() -> None:
    cfg = config.from_env({})
    assert cfg.secret_namespaces == () and not cfg.may_read_secrets("apps"), "no Secret is read by default"
    assert cfg.pod_monitor_labels == {} and cfg.deletion_cost is True
    cfg = config.from_env({"DBWORKER_OPERATOR_SECRET_NAMESPACES": "apps, media",
                           "DBWORKER_OPERATOR_POD_MONITOR_LABELS": "release=kube-prometheus-stack,team=ops",
                           "DBWORKER_OPERATOR_DELETION_COST": "false"})
    assert cfg.may_read_secrets("media") and not cfg.may_read_secrets("other")
    assert cfg.pod_monitor_labels == {"release": "kube-prometheus-stack", "team": "ops"}
    assert cfg.deletion_cost is False
    assert config.from_env({"DBWORKER_OPERATOR_SECRET_NAMESPACES": "*"}).may_read_secrets("any")
    for env, name in [({"DBWORKER_OPERATOR_POD_MONITOR_LABELS": "release"}, "DBWORKER_OPERATOR_POD_MONITOR_LABELS"),
                      ({"DBWORKER_OPERATOR_POD_MONITOR_LABELS": "a=b c"}, "DBWORKER_OPERATOR_POD_MONITOR_LABELS"),
                      ({"DBWORKER_OPERATOR_DELETION_COST": "maybe"}, "DBWORKER_OPERATOR_DELETION_COST")]:
        with pytest.raises(config.ConfigError, match=name):
            config.from_env(env)
