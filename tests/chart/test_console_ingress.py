"""The chart's Ingress to a Worker's console (workers[].consoleIngress): off by default, pointed
at the Service the operator builds for spec.console, refused without the console."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from dbworker_operator import spec
from dbworker_operator.builders import console

from tests.chart.conftest import NAMESPACE, WORKER_SPEC, all_on, by_kind, notes, objects, render

KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
TOKEN = {"name": "shop-console", "key": "tokens"}


def _worker(**item: Any) -> dict[str, Any]:
    return {"name": "shop", "namespace": "shop", "spec": {**WORKER_SPEC, "console": {"enabled": True,
                                                                                     "tokenSecretRef": TOKEN}},
            **item}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_ingress_reaches_the_service_the_operator_builds(chart: helm.Chart, kube_version: str) -> None:
    objs = objects(chart, all_on())
    [ingress] = by_kind(objs, "Ingress")
    kubernetes_validate.validate(ingress, kube_version, strict=True)
    worker = next(w for w in by_kind(objs, "Worker") if w["metadata"]["name"] == "shop")
    service = console.build_service(spec.parse(worker))  # what the operator makes of the rendered Worker
    assert service is not None
    assert ingress["metadata"]["namespace"] == service["metadata"]["namespace"] == "shop"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"] == "shop-console"
    assert backend["port"] == {"name": service["spec"]["ports"][0]["name"]}
    assert ingress["spec"]["rules"][0]["host"] == "jobs.shop.example.com"
    assert ingress["spec"]["tls"] == [{"hosts": ["jobs.shop.example.com"], "secretName": "jobs-shop-tls"}]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}


def test_no_ingress_unless_asked_for(chart: helm.Chart) -> None:
    assert by_kind(objects(chart, None), "Ingress") == []
    assert by_kind(objects(chart, {"workers": [_worker()]}), "Ingress") == []  # a console, no Ingress
    plain = by_kind(objects(chart, {"workers": [_worker(consoleIngress={"enabled": True, "host": "c.example"})]}),
                    "Ingress")
    assert len(plain) == 1 and "tls" not in plain[0]["spec"] and "ingressClassName" not in plain[0]["spec"]


def test_an_ingress_without_the_console_says_what_to_turn_on(chart: helm.Chart) -> None:
    values = {"workers": [{"name": "shop", "spec": WORKER_SPEC,
                           "consoleIngress": {"enabled": True, "host": "c.example"}}]}
    with pytest.raises(helm.HelmError, match=r"workers\[0\]\.consoleIngress\.enabled needs "
                                             r"workers\[0\]\.spec\.console\.enabled: true"):
        render(chart, values)


@pytest.mark.parametrize(
    ("item", "key", "why"),
    [
        ({"consoleIngress": {"enabled": True}}, "/workers/0/consoleIngress", "missing property 'host'"),
        ({"consoleIngress": {"enabled": True, "host": "Not A Host"}}, "/workers/0/consoleIngress/host",
         "does not match pattern"),
        ({"consoleIngress": {"enabled": True, "host": "c.example", "path": "/console"}},
         "/workers/0/consoleIngress", "'path' not allowed"),
        ({"spec": {**WORKER_SPEC, "console": {"enabled": True}}}, "/workers/0/spec/console",
         "missing property 'tokenSecretRef'"),
        ({"spec": {**WORKER_SPEC, "console": {"enabled": True, "tokenSecretRef": TOKEN,
                                              "service": {"type": "ExternalName"}}}},
         "/workers/0/spec/console/service/type", "must be one of"),
    ],
)
def test_bad_console_values_name_the_key(chart: helm.Chart, item: dict[str, Any], key: str, why: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        render(chart, {"workers": [_worker(**item)]})
    message = str(caught.value)
    assert f"at {key}" in message or f"at '{key}'" in message, message
    assert why in message, message


def test_notes_say_where_each_console_is(chart: helm.Chart) -> None:
    text = notes(chart, all_on())
    assert "shop/shop, console at https://jobs.shop.example.com/\n" in text
    assert f"{NAMESPACE}/mail\n" in text  # no console
    forwarded = notes(chart, {"workers": [_worker()]})
    assert "shop/shop, console: kubectl -n shop port-forward svc/shop-console 8080:80\n" in forwarded
