"""The real operator (`python -m dbworker_operator`, kopf underneath) against the emulated API.

One emulator and one operator process serve the whole module (startup is the slow part); each
test uses its own Worker. The test acts as kubectl and as the Deployment controller would
(patching Deployment status, creating pods), over HTTP. Fake pods' /metrics are served on
127.0.0.2 and 127.0.0.3 so the operator scrapes two distinct "pods" on one port.
"""

from __future__ import annotations

import base64
import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import wait_until
from tests.k8s import samples
from tests.k8s.emulator import EmulatorThread, running

NS = "apps"
WORKERS = f"/apis/dbworker.dev/v1alpha1/namespaces/{NS}/workers"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
PODS = f"/api/v1/namespaces/{NS}/pods"
EVENTS = f"/api/v1/namespaces/{NS}/events"
MERGE = {"Content-Type": "application/merge-patch+json"}
TIMEOUT = 30.0
ROOT = Path(__file__).resolve().parents[2]


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class FakePod:
    """A pod's /metrics endpoint: serves whatever ``text`` is set to."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip = ip
        self.text = ""
        pod = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pod.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((ip, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Operator:
    """The operator process plus an HTTP client acting as kubectl."""

    def __init__(self, emulator: EmulatorThread, tmp: Path) -> None:
        self.emulator = emulator
        self.api = httpx.Client(base_url=emulator.url, timeout=10)
        self.liveness_port = _free_port()
        self.metrics_port = _free_port()
        self.log_path = tmp / "operator.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DBWORKER_OPERATOR_")}
        env.update(
            KUBECONFIG=str(emulator.kubeconfig(tmp / "kubeconfig")),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "operator"), env.get("PYTHONPATH")])),
            DBWORKER_OPERATOR_RESYNC_SECONDS="0.5",
            DBWORKER_OPERATOR_LIVENESS_PORT=str(self.liveness_port),
            DBWORKER_OPERATOR_METRICS_PORT=str(self.metrics_port),
            DBWORKER_OPERATOR_PRIORITY="100",
            DBWORKER_OPERATOR_LOG_LEVEL="DEBUG",
        )
        # kopf requires its peering object to exist; a cluster admin (or the chart) creates it.
        self.api.post("/apis/kopf.dev/v1/clusterkopfpeerings", json={"metadata": {"name": "dbworker-operator"}})
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "dbworker_operator"], env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()
        self.api.close()

    def log(self) -> str:
        return self.log_path.read_text()

    # ---- kubectl-like helpers ----

    def get(self, path: str) -> dict[str, Any] | None:
        response = self.api.get(path)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return dict(response.json())

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.api.post(path, json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.api.patch(path, json=body, headers=MERGE)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def delete(self, path: str) -> None:
        assert self.api.delete(path).status_code == 200

    def secret(self, name: str, data: dict[str, str]) -> None:
        self.create(SECRETS, {"metadata": {"name": name},
                              "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})

    def worker(self, name: str, **spec: Any) -> dict[str, Any]:
        body = samples.minimal(name, NS)
        del body["metadata"]["uid"], body["metadata"]["generation"]
        body["spec"]["database"]["urlSecretRef"]["name"] = f"{name}-db"
        body["spec"].update(spec)
        return self.create(WORKERS, body)

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        worker = self.get(f"{WORKERS}/{name}") or {}
        for cond in (worker.get("status") or {}).get("conditions") or []:
            if cond["type"] == ctype:
                return dict(cond)
        return None

    def events(self, name: str) -> list[tuple[str, str, str]]:
        items = (self.get(EVENTS) or {}).get("items") or []
        return [(e["type"], e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == name]

    def act_as_deployment_controller(self, name: str) -> None:
        """Report every desired pod updated, ready and available, as kube-controller-manager would."""
        dep = self.get(f"{DEPLOYMENTS}/{name}")
        assert dep is not None
        n = dep["spec"].get("replicas", 1)
        self.api.patch(f"{DEPLOYMENTS}/{name}/status", headers=MERGE, json={"status": {
            "observedGeneration": dep["metadata"]["generation"], "replicas": n, "readyReplicas": n,
            "updatedReplicas": n, "availableReplicas": n}}).raise_for_status()

    def wait(self, predicate: Callable[[], Any], what: str) -> Any:
        if self.process.poll() is not None:
            raise AssertionError(f"the operator exited ({self.process.returncode}):\n{self.log()[-3000:]}")
        try:
            return wait_until(predicate, timeout=TIMEOUT, interval=0.1, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- operator log tail ---\n{self.log()[-3000:]}") from None


@pytest.fixture(scope="module")
def op(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    with running() as emulator:
        operator = Operator(emulator, tmp_path_factory.mktemp("operator"))
        try:
            operator.wait(lambda: httpx.get(f"http://127.0.0.1:{operator.liveness_port}/healthz").status_code == 200,
                          "the operator's liveness endpoint")
            yield operator
        finally:
            operator.stop()


@pytest.fixture(scope="module")
def pods() -> Iterator[tuple[FakePod, FakePod]]:
    port = _free_port("127.0.0.2")
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
    assert ("Normal", "Applied", "Created Deployment alpha") in op.events("alpha")
    assert "s3cret" not in op.log()


def test_update_rolls_out_the_new_spec(op: Operator) -> None:
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "alpha's Deployment")
    op.patch(f"{WORKERS}/alpha", {"spec": {"image": "registry.example/imgdedup:2.0", "concurrency": {"hash": 3}}})
    def rolled() -> bool:
        dep = op.get(f"{DEPLOYMENTS}/alpha") or {}
        container = dep["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        return container["image"].endswith(":2.0") and env.get("DBWORKER_CONCURRENCY") == "hash=3"
    op.wait(rolled, "the new image and concurrency in the Deployment")
    op.act_as_deployment_controller("alpha")
    op.wait(lambda: (op.get(f"{WORKERS}/alpha") or {}).get("status", {}).get("observedGeneration") == 2,
            "observedGeneration 2")


def test_scale_subresource_scales_the_deployment(op: Operator) -> None:
    response = op.api.patch(f"{WORKERS}/alpha/scale", json={"spec": {"replicas": 4}}, headers=MERGE)
    assert response.status_code == 200, response.text
    op.wait(lambda: (op.get(f"{DEPLOYMENTS}/alpha") or {})["spec"].get("replicas") == 4, "4 replicas")
    op.act_as_deployment_controller("alpha")
    op.wait(lambda: (op.get(f"{WORKERS}/alpha") or {}).get("status", {}).get("replicas") == 4, "status.replicas 4")


def test_drift_is_put_back(op: Operator) -> None:
    dep = op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "alpha's Deployment")
    containers = dep["spec"]["template"]["spec"]["containers"]
    containers[0]["image"] = "evil:latest"
    op.patch(f"{DEPLOYMENTS}/alpha", {"spec": {"replicas": 9, "template": {"spec": {"containers": containers}}}})
    def restored() -> bool:
        current = op.get(f"{DEPLOYMENTS}/alpha") or {}
        image = str(current["spec"]["template"]["spec"]["containers"][0]["image"])
        return image.endswith(":2.0") and current["spec"]["replicas"] == 4
    op.wait(restored, "the edited Deployment restored")
    op.delete(f"{DEPLOYMENTS}/alpha")
    recreated = op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "the deleted Deployment recreated")
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


def test_spec_the_schema_would_reject_is_reported_not_crashed_on(op: Operator) -> None:
    op.secret("gamma-db", {"url": "sqlite:///x"})
    op.worker("gamma", app="not-module-attr")  # the emulator has no CRD schema; an old CRD might not either
    degraded = op.wait(lambda: op.condition("gamma", "Degraded"), "a Degraded condition")
    assert degraded["reason"] == "InvalidSpec" and "spec.app" in degraded["message"]
    assert op.get(f"{DEPLOYMENTS}/gamma") is None


def _pod(name: str, worker: str, ip: str, **container_status: Any) -> dict[str, Any]:
    status = {"name": "worker", "ready": True, "state": {"running": {}}, **container_status}
    return {"metadata": {"name": name, "labels": {"app.kubernetes.io/name": "dbworker",
                                                  "app.kubernetes.io/instance": worker}},
            "spec": {"containers": [{"name": "worker", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "containerStatuses": [status]}}


def test_unknown_worker_reported_by_a_pod_degrades(op: Operator) -> None:
    op.secret("delta-db", {"url": "sqlite:///x"})
    op.worker("delta", workers=["resize"])
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/delta"), "the Deployment")
    message = "dbworker: unknown worker 'resize' (--worker); known workers: hash, compare"
    op.create(PODS, _pod("delta-abc-1", "delta", "127.0.0.9", ready=False,
                         state={"waiting": {"reason": "CrashLoopBackOff"}},
                         lastState={"terminated": {"exitCode": 2, "message": message}}))
    op.wait(lambda: (op.condition("delta", "Degraded") or {}).get("reason") == "UnknownWorker", "UnknownWorker")
    assert "known workers: hash, compare" in (op.condition("delta", "Degraded") or {})["message"]
    assert "spec.workers" in (op.condition("delta", "Degraded") or {})["message"]


def test_backlog_and_pod_deletion_cost_come_from_pod_metrics(op: Operator, pods: tuple[FakePod, FakePod]) -> None:
    busy, idle = pods
    port = busy.server.server_address[1]
    busy.text = 'dbworker_backlog{worker="hash"} 10\ndbworker_handlers_active{worker="hash"} 3\n'
    idle.text = 'dbworker_backlog{worker="hash"} 9\ndbworker_handlers_active{worker="hash"} 0\n'
    op.secret("epsilon-db", {"url": "sqlite:///x"})
    op.worker("epsilon", metrics={"port": port})
    op.create(PODS, _pod("epsilon-abc-1", "epsilon", busy.ip))
    op.create(PODS, _pod("epsilon-abc-2", "epsilon", idle.ip))
    op.wait(lambda: (op.get(f"{WORKERS}/epsilon") or {}).get("status", {}).get("backlog") == 10, "backlog 10")

    def cost(pod: str) -> str | None:
        annotations = (op.get(f"{PODS}/{pod}") or {}).get("metadata", {}).get("annotations") or {}
        return annotations.get("controller.kubernetes.io/pod-deletion-cost")
    op.wait(lambda: cost("epsilon-abc-1") == "3" and cost("epsilon-abc-2") == "0", "deletion costs 3 and 0")
    busy.text = 'dbworker_backlog{worker="hash"} 0\ndbworker_handlers_active{worker="hash"} 0\n'
    op.wait(lambda: cost("epsilon-abc-1") == "0", "the busy pod's cost back to 0 once idle")


def test_autoscaling_without_keda_says_why_nothing_scales(op: Operator) -> None:
    op.secret("zeta-db", {"url": "sqlite:///x"})
    op.worker("zeta", replicas=2, autoscaling={"minReplicas": 1, "maxReplicas": 5})
    cond = op.wait(lambda: op.condition("zeta", "AutoscalingActive"), "an AutoscalingActive condition")
    assert cond["status"] == "False" and cond["reason"] == "KEDANotInstalled"
    assert (op.get(f"{DEPLOYMENTS}/zeta") or {})["spec"]["replicas"] == 2


def test_deleting_the_worker_removes_what_it_owns(op: Operator) -> None:
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "alpha's Deployment")
    op.delete(f"{WORKERS}/alpha")  # no finalizer: gone at once, owner references do the rest
    op.wait(lambda: op.get(f"{WORKERS}/alpha") is None, "the Worker gone")
    op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha") is None, "its Deployment collected")
    resync_passes = _metric(op, "dbworker_operator_reconciles_total", 'kind="timer",result="ok"')
    op.wait(lambda: _metric(op, "dbworker_operator_reconciles_total", 'kind="timer",result="ok"') > resync_passes + 3,
            "a few more resync passes")
    assert op.get(f"{DEPLOYMENTS}/alpha") is None, "the operator must not resurrect a deleted Worker's objects"


def _metric(op: Operator, name: str, labels: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{op.metrics_port}/metrics").text
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_operator_metrics_count_reconciles_without_errors(op: Operator) -> None:
    assert _metric(op, "dbworker_operator_reconciles_total", 'result="ok"') > 0
    assert _metric(op, "dbworker_operator_reconciles_total", 'kind="timer",result="error"') == 0
    assert "Traceback" not in op.log()
