"""spec.processes of a Worker (async handlers, docs/async.md): the API server's and the
operator's checks, the pods' DBWORKER_PROCESSES, and the connection budget it implies."""

from __future__ import annotations

from typing import Any

import pytest
from dbworker_operator import rules, spec
from dbworker_operator.builders import deployment

from dbworker.sql import drivers
from tests.k8s import samples

pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules")

from tests.k8s.apiserver_rules import check


def _full(**changes: Any) -> dict[str, Any]:
    return samples.with_spec(samples.full(), **changes)


def test_processes_reach_the_pods() -> None:
    body = _full(concurrency={"hash": 200, "compare": 2}, processes={"hash": 2})
    assert check(body) == []
    parsed = spec.parse(body)
    assert parsed.processes == (("hash", 2),)
    env = deployment.build(parsed, replicas=1)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DBWORKER_PROCESSES", "value": "hash=2"} in env


@pytest.mark.parametrize(
    ("changes", "field", "api_refuses"),
    [
        ({"processes": {"hash": 0}}, "spec.processes.hash", True),
        ({"processes": {"hash": 5000}}, "spec.processes.hash", True),
        ({"processes": {"nope": 1}}, "spec.processes.nope", True),  # not in spec.workers
        ({"processes": {"hash": 5}}, "spec.processes.hash", False),  # more than concurrency.hash (4)
    ],
)
def test_bad_processes_are_refused_naming_the_field(changes: dict[str, Any], field: str, api_refuses: bool) -> None:
    body = _full(**changes)
    assert bool(check(body)) is api_refuses
    with pytest.raises(spec.SpecError) as refused:
        spec.parse(body)
    assert str(refused.value).startswith(field), refused.value


def test_the_budget_counts_an_async_workers_processes_not_its_items() -> None:
    sync = spec.parse(_full(concurrency={"hash": 200, "compare": 2}))
    many = spec.parse(_full(concurrency={"hash": 200, "compare": 2}, processes={"hash": 2}))
    small = spec.parse(_full(concurrency={"hash": 3, "compare": 2}, processes={"hash": 2}))
    base = sync.connections_per_pod - 202
    assert many.connections_per_pod == base + 2 * rules.ASYNC_POOL_MAX + 2
    assert small.connections_per_pod == base + 2 * 2 + 2  # each process at most its share (2)
    assert spec.async_connections(1024, 1) == rules.ASYNC_POOL_MAX


def test_the_operators_pool_bound_is_the_librarys() -> None:
    assert rules.ASYNC_POOL_MAX == drivers.ASYNC_POOL_MAX
