"""The chart's copy of the Worker CRD (what `helm install` puts in a cluster) refuses what the
operator refuses: numbers past their bounds, spec.env setting the dbworker command's own
variables, a database.envName the loader or Python reads."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import jsonschema
import pytest

from tests.chart.conftest import all_on, by_kind, crd_schemas, objects

pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules")
from tests.k8s.apiserver_rules import cel_violations


def _refusals(worker: dict[str, Any]) -> list[str]:
    schema = crd_schemas()[("dbworker.dev/v1alpha1", "Worker")]
    errors = [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(worker)]
    return errors or cel_violations(schema, worker)


def _rendered_worker(chart: helm.Chart, **spec: Any) -> dict[str, Any]:
    values = all_on()
    values["workers"][0]["spec"].update(spec)
    [worker, _] = by_kind(objects(chart, values), "Worker")
    return worker


@pytest.mark.parametrize(("spec", "expected"), [
    ({"leaseSeconds": 90000}, "is greater than the maximum of 86400"),
    ({"replicas": 100000}, "is greater than the maximum of 1000"),
    ({"podAnnotations": {"big": "x" * 5000}}, "is too long"),
    ({"env": [{"name": "DBWORKER_LEASE_SECONDS", "value": "1e308"}]}, "spec.env may not set DBWORKER_*"),
    ({"env": [{"name": "DBWORKER_TERMINATION_LOG", "value": "/dev/null"}]}, "spec.env may not set DBWORKER_*"),
])
def test_the_charts_crd_refuses_what_the_operator_refuses(chart: helm.Chart, spec: dict[str, Any],
                                                         expected: str) -> None:
    worker = _rendered_worker(chart)
    assert _refusals(worker) == []
    worker["spec"].update(spec)  # as applied by hand, past the chart's values schema
    refusals = _refusals(worker)
    assert any(expected in r for r in refusals), refusals


@pytest.mark.parametrize("spec", [{"leaseSeconds": 90000}, {"replicas": 100000}])
def test_the_charts_values_schema_refuses_numbers_past_their_bounds(chart: helm.Chart, spec: dict[str, Any]) -> None:
    with pytest.raises(helm.errors.HelmValuesError, match="maximum"):
        _rendered_worker(chart, **spec)


def test_the_charts_crd_refuses_a_database_variable_the_loader_reads(chart: helm.Chart) -> None:
    worker = _rendered_worker(chart)
    for name in ("LD_PRELOAD", "PYTHONPATH", "PATH", "DBWORKER_APP"):
        worker["spec"]["database"]["envName"] = name
        assert any("database.envName may not name" in r for r in _refusals(worker)), name
    worker["spec"]["database"]["envName"] = "APP_DATABASE_URL"
    assert _refusals(worker) == []
