"""One set of rules for a Worker: what the API server refuses (the CRD's schema and CEL rules)
the operator refuses too, with the same bounds from rules.py and an error naming the field, the
bound and the fix. Every number has an upper bound; spec.env cannot set the dbworker command's
own variables; spec.database.envName cannot name what the loader or Python reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dbworker_operator import rules, spec

from tests.k8s import samples

pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules")
from tests.k8s.apiserver_rules import check
from tests.k8s.test_crd import BAD

ROOT = Path(__file__).resolve().parents[2]


def _full(**changes: Any) -> dict[str, Any]:
    return samples.with_spec(samples.full(), **changes)


def _console(**fields: Any) -> dict[str, Any]:
    return _full(console={"enabled": True, "tokenSecretRef": {"name": "c", "key": "t"}, **fields})


def _source(**fields: Any) -> dict[str, Any]:
    return _full(autoscaling={"maxReplicas": 4, "database": {
        "type": "postgresql", "connectionKey": "keda", "sources": [{"worker": "hash", "table": "images", **fields}]}})


# Each refused by the API server and by the operator; the operator's error names this field.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("a lease the lease keeper's timer cannot hold", _full(leaseSeconds=1e308), "spec.leaseSeconds"),
    ("a lease longer than a day", _full(leaseSeconds=86401), "spec.leaseSeconds"),
    ("a poll past a day", _full(pollSeconds=1e6, maxPollSeconds=None), "spec.pollSeconds"),
    ("a longest poll past a day", _full(maxPollSeconds=1e9), "spec.maxPollSeconds"),
    ("too many replicas", _full(replicas=100000), "spec.replicas"),
    ("too many autoscaled replicas", _full(autoscaling={"maxReplicas": 5000}), "spec.autoscaling.maxReplicas"),
    ("a floor past the ceiling's bound", _full(autoscaling={"minReplicas": 2000, "maxReplicas": 1000}),
     "spec.autoscaling.minReplicas"),
    ("an absurd target per slot", _full(autoscaling={"maxReplicas": 4, "targetPerSlot": 1e9}),
     "spec.autoscaling.targetPerSlot"),
    ("too many handlers", _full(concurrency={"hash": 5000}), "spec.concurrency.hash"),
    ("a budget count past the pod bound", _full(disruptionBudget={"maxUnavailable": 5000}),
     "spec.disruptionBudget.maxUnavailable"),
    ("too many annotations", _full(podAnnotations={f"a{i}": "x" for i in range(rules.MAX_POD_ANNOTATIONS + 1)}),
     "spec.podAnnotations"),
    ("an annotation too large", _full(podAnnotations={"big": "x" * (rules.MAX_ANNOTATION_VALUE + 1)}),
     "spec.podAnnotations.big"),
    ("too many pod labels", _full(podLabels={f"l{i}": "x" for i in range(rules.MAX_LABELS + 1)}), "spec.podLabels"),
    ("a pod label value Kubernetes refuses", _full(podLabels={"team": "not valid!"}), "spec.podLabels.team"),
    ("too many console pods", _console(replicas=500), "spec.console.replicas"),
    ("too many supplemental groups", _full(podSecurityContext={"supplementalGroups": list(range(40))}),
     "spec.podSecurityContext.supplementalGroups"),
    ("a service account name that is not a DNS name", _full(serviceAccountName="Not_A_Name"),
     "spec.serviceAccountName"),
    ("a console service port out of range", _console(service={"port": 70000}), "spec.console.service.port"),
    ("a filter too long", _source(filter="ready AND " * 300 + "ready"), "filter"),
    ("too many variables", _full(env=[{"name": f"V{i}", "value": "x"} for i in range(rules.MAX_ENV + 1)]), "spec.env"),
    ("a log level the command does not know", _full(logLevel="LOUD"), "spec.logLevel"),
    ("the database URL as the loader's preload list", _full(database={
        "urlSecretRef": {"name": "db", "key": "url"}, "envName": "LD_PRELOAD"}), "spec.database.envName"),
    ("the database URL as Python's module path", _full(database={
        "urlSecretRef": {"name": "db", "key": "url"}, "envName": "PYTHONPATH"}), "spec.database.envName"),
    ("the database URL as the command's PATH", _full(database={
        "urlSecretRef": {"name": "db", "key": "url"}, "envName": "PATH"}), "spec.database.envName"),
    ("the database URL as a dbworker setting", _full(database={
        "urlSecretRef": {"name": "db", "key": "url"}, "envName": "DBWORKER_APP"}), "spec.database.envName"),
]


@pytest.mark.parametrize(("case", "body", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_api_server_and_the_operator_refuse_the_same_workers(case: str, body: dict[str, Any],
                                                                 field: str) -> None:
    assert check(body), f"{case}: the API server admitted it"
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(body)
    assert field in str(refused.value), f"{case}: {refused.value}"


@pytest.mark.parametrize(("case", "body", "expected"), BAD, ids=[b[0] for b in BAD])
def test_every_worker_the_crd_refuses_the_operator_refuses_too(case: str, body: dict[str, Any],
                                                               expected: str) -> None:
    """A Worker admitted by an older CRD (or written past it) never reaches the builders."""
    with pytest.raises(spec.SpecError):
        spec.parse(body)


def test_bounds_hold_at_their_edges_in_both() -> None:
    edges = [
        _full(leaseSeconds=rules.MAX_SECONDS, pollSeconds=rules.MAX_SECONDS, maxPollSeconds=rules.MAX_SECONDS),
        _full(replicas=rules.MAX_PODS),
        _full(autoscaling={"minReplicas": rules.MAX_PODS, "maxReplicas": rules.MAX_PODS,
                           "targetPerSlot": rules.MAX_TARGET_PER_SLOT}),
        _full(disruptionBudget={"maxUnavailable": rules.MAX_PODS}),
        _full(podAnnotations={f"example.com/a{i}": "x" * rules.MAX_ANNOTATION_VALUE
                              for i in range(rules.MAX_POD_ANNOTATIONS)}),
        _full(env=[{"name": "LD_PRELOAD", "value": "/app/libfast.so"}, {"name": "PYTHONPATH", "value": "/app"},
                   {"name": "MY_DBWORKER_SETTING", "value": "x"}]),
        _full(database={"urlSecretRef": {"name": "db", "key": "url"}, "envName": "APP_PYTHONPATH_URL"}),
    ]
    for body in edges:
        assert check(body) == [], body["spec"]
        spec.parse(body)


def test_errors_name_the_field_the_bound_and_the_fix() -> None:
    with pytest.raises(spec.SpecError) as lease:
        spec.parse(_full(leaseSeconds=1e308))
    assert re.search(r"spec\.leaseSeconds is 1e\+308; use a number > 0 and <= 86400", str(lease.value))
    assert "the operator's README lists them" in str(lease.value)
    with pytest.raises(spec.SpecError) as replicas:
        spec.parse(_full(replicas=100000))
    assert "spec.replicas is 100000; use an integer >= 0 and <= 1000" in str(replicas.value)
    with pytest.raises(spec.SpecError) as env_name:
        spec.parse(_full(database={"urlSecretRef": {"name": "db", "key": "url"}, "envName": "LD_PRELOAD"}))
    assert "keep DATABASE_URL" in str(env_name.value)


@pytest.mark.parametrize("variable", sorted(rules.DBWORKER_VARIABLES))
def test_spec_env_cannot_set_the_commands_own_variables(variable: str) -> None:
    body = _full(env=[{"name": "LOG_LEVEL", "value": "debug"}, {"name": variable, "value": "1e308"}])
    assert any("spec.env may not set DBWORKER_*" in p for p in check(body)), variable
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(body)
    message = str(refused.value)
    assert message.startswith(f"spec.env[1].name: {variable} ")
    field = rules.DBWORKER_VARIABLES[variable]
    assert (f"set {field} instead" in message) if field else ("the operator sets it" in message)


def test_the_fields_that_replace_the_variables_reach_the_pods() -> None:
    """spec.logLevel and spec.wakeupTriggers: what DBWORKER_LOG_LEVEL and DBWORKER_NO_WAKEUP_TRIGGERS
    in spec.env used to set, for the migrate and the worker containers alike."""
    from dbworker_operator.builders import deployment

    body = _full(logLevel="DEBUG", wakeupTriggers=False)
    assert check(body) == []
    built = deployment.build(spec.parse(body), replicas=1)
    pod = built["spec"]["template"]["spec"]
    for container in [*pod["initContainers"], *pod["containers"]]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DBWORKER_LOG_LEVEL"] == "DEBUG" and env["DBWORKER_NO_WAKEUP_TRIGGERS"] == "true"
    plain = deployment.build(spec.parse(_full()), replicas=1)["spec"]["template"]["spec"]["containers"][0]
    assert not {"DBWORKER_LOG_LEVEL", "DBWORKER_NO_WAKEUP_TRIGGERS"} & {e["name"] for e in plain["env"]}


def test_an_unknown_dbworker_variable_is_refused_too() -> None:
    body = _full(env=[{"name": "DBWORKER_SOMETHING_NEW", "value": "x"}])
    assert check(body)
    with pytest.raises(spec.SpecError, match=r"spec\.env\[0\]\.name: DBWORKER_SOMETHING_NEW"):
        spec.parse(body)


def test_the_refused_variables_are_every_one_the_command_reads() -> None:
    """rules.DBWORKER_VARIABLES is a copy (the operator imports only dbworker.redact): it must list
    every variable of the option table and every DBWORKER_* name the library's code spells."""
    options = pytest.importorskip("dbworker.pod.options")
    read = {option.env for option in options.OPTIONS}
    spelled = {name for path in (ROOT / "dbworker").rglob("*.py")
               for name in re.findall(r"\bDBWORKER_[A-Z][A-Z_]*[A-Z]\b", path.read_text())}
    spelled.discard("DBWORKER_X")  # the option table's help text: DBWORKER_<OPTION>
    assert read | spelled <= set(rules.DBWORKER_VARIABLES), sorted((read | spelled) - set(rules.DBWORKER_VARIABLES))


# ---- the KEDA database trigger's filter ----------------------------------------------------

ACCEPTED_FILTERS = [
    ("postgresql", "ready AND NOT archived"),
    ("postgresql", "status = 'new' OR (retries < 3 AND owner IS NOT NULL)"),
    ("postgresql", "created_at < now() - interval '1 hour'"),
    ("postgresql", "kind IN ('a', 'b') AND size BETWEEN 1 AND 100 AND lower(name) LIKE 'img%'"),
    ("postgresql", "images.ready"),
    ("mysql", "ready AND NOT archived"),
    ("mysql", "created_at < NOW() - INTERVAL 1 HOUR"),
    ("mysql", "coalesce(size, 0) > 10 AND name = 'it''s'"),
]
REFUSED_FILTERS = [
    ("mysql", "ready # AND archived", "comment"),  # MySQL's own comment: passed the old deny-list
    ("mysql", "ready /* x */", "comment"),
    ("postgresql", "ready -- x", "comment"),
    ("postgresql", "ready; DROP TABLE images", "one expression"),
    ("postgresql", "id IN (SELECT id FROM secrets)", "subquery"),
    ("mysql", "EXISTS (SELECT 1 FROM mysql.user)", "EXISTS"),
    ("postgresql", "pg_sleep(10) IS NULL", "pg_sleep"),
    ("mysql", "sleep(5) = 0", "sleep"),
    ("mysql", "load_file('/etc/passwd') IS NOT NULL", "load_file"),
    ("postgresql", "users.admin", "table 'users'"),
    ("mysql", "@@version = 1", "SessionParameter"),
    ("mysql", r"name = 'x\' OR 1=1", "backslash"),
    ("postgresql", "a = $$x$$", "RawString"),
    ("postgresql", "1 + 1", "not a condition"),
    ("postgresql", "a = 1 ) OR (1 = 1", "does not parse"),
]


def _filtered(kind: str, condition: str) -> dict[str, Any]:
    return _full(autoscaling={"maxReplicas": 4, "database": {
        "type": kind, "connectionKey": "keda",
        "sources": [{"worker": "hash", "table": "images", "filter": condition}]}})


@pytest.mark.parametrize(("kind", "condition"), ACCEPTED_FILTERS)
def test_a_filter_that_is_one_condition_on_the_source_is_accepted(kind: str, condition: str) -> None:
    from dbworker_operator.builders import autoscaling

    parsed = spec.parse(_filtered(kind, condition))
    assert parsed.autoscaling is not None and parsed.autoscaling.database is not None
    assert f" AND ({condition})" in autoscaling.claimable_query(parsed.autoscaling.database)


@pytest.mark.parametrize(("kind", "condition", "why"), REFUSED_FILTERS)
def test_a_filter_a_parser_does_not_read_as_one_condition_on_the_source_is_refused(
        kind: str, condition: str, why: str) -> None:
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(_filtered(kind, condition))
    message = str(refused.value)
    assert message.startswith("spec.autoscaling.database.sources[0].filter: "), message
    assert why in message and "write one condition on the source table's columns" in message, message
