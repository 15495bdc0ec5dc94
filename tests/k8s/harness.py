"""The operator process and a kubectl-like client for tests against the emulated API.

``Operator`` starts `python -m dbworker_operator` (kopf underneath) on a kubeconfig pointing at
an ``EmulatorThread``; the test acts as kubectl and as the controllers the emulator lacks
(Deployment status, pods). ``FakePod`` serves a pod's /metrics on its own loopback address.
"""

from __future__ import annotations

import base64
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from dbworker_operator import kinds

from tests.helpers import wait_until
from tests.k8s import samples
from tests.k8s.emulator import EmulatorThread, RKey

WORKER_RESOURCE: RKey = ("dbworker.dev", "v1alpha1", "workers")
# A log record starts with its timestamp; a traceback's lines belong to the record above them.
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
# kopf's watch streams, closed by SIGTERM, sometimes fail their own close (asyncio logs
# "generator didn't stop after athrow()" for kopf's infinite_watch, or an exception in the
# cancel callback of kopf's API stream): kopf's shutdown, not ours.
KOPF_WATCH_CLOSE = re.compile(r"ERROR asyncio: (an error occurred during closing of asynchronous generator"
                              r" <async_generator object infinite_watch |Exception in callback"
                              r" stream\.<locals>\.request_cancel_callback\()")
# The second of those also when a standby operator pauses its watch streams on seeing a
# leader (kopf's peering): kopf stops a stream whose request already ended, and its stopper's
# callback, run outside the stream's task, fails its own assertion. kopf's, not ours.
KOPF_STREAM_STOP = re.compile(r"ERROR asyncio: Exception in callback stream\.<locals>\.request_cancel_callback\(")


def admission() -> dict[RKey, Callable[[dict[str, Any]], list[str]]]:
    """The Worker CRD's schema and CEL rules as the emulator's admission (when cel-python is here)."""
    try:
        from tests.k8s.apiserver_rules import check
    except ImportError:  # cel-python missing: the emulator admits everything
        return {}
    return {WORKER_RESOURCE: check}

NS = "apps"
WORKERS = f"/apis/dbworker.dev/v1alpha1/namespaces/{NS}/workers"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
PODS = f"/api/v1/namespaces/{NS}/pods"
EVENTS = f"/api/v1/namespaces/{NS}/events"
MERGE = {"Content-Type": "application/merge-patch+json"}
TIMEOUT = 30.0
ROOT = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class FakePod:
    """A pod's /metrics endpoint: serves whatever ``text`` is set to."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip = ip
        self.text = ""
        self.headers: list[dict[str, str]] = []  # of every scrape, to check no credentials leak
        pod = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pod.headers.append(dict(self.headers.items()))
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


def _records(text: str) -> list[list[str]]:
    """``text``'s log records, each its lines (a traceback belongs to the record above it)."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if RECORD_START.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return records

class Operator:
    """The operator process plus an HTTP client acting as kubectl."""

    def __init__(self, emulator: EmulatorThread, tmp: Path, *, priority: int = 100,
                 env: dict[str, str] | None = None, command: list[str] | None = None) -> None:
        """``command`` runs the operator another way (tests/images: its image, under podman)."""
        self.emulator = emulator
        self.api = httpx.Client(base_url=emulator.url, timeout=10)
        self.liveness_port = free_port()
        self.metrics_port = free_port()
        self.log_path = tmp / f"operator-{priority}.log"
        self._stopped_at: int | None = None  # the log's length when stop() sent SIGTERM
        self.kubeconfig = emulator.kubeconfig(tmp / f"kubeconfig-{priority}")
        process_env = {k: v for k, v in os.environ.items() if not k.startswith("DBWORKER_OPERATOR_")}
        process_env.update(
            KUBECONFIG=str(self.kubeconfig),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "operator"), process_env.get("PYTHONPATH")])),
            DBWORKER_OPERATOR_RESYNC_SECONDS="0.5",
            DBWORKER_OPERATOR_LIVENESS_PORT=str(self.liveness_port),
            DBWORKER_OPERATOR_METRICS_PORT=str(self.metrics_port),
            DBWORKER_OPERATOR_PRIORITY=str(priority),
            DBWORKER_OPERATOR_LOG_LEVEL="DEBUG",
        )
        process_env.update(env or {})
        # kopf requires its peering object to exist; a cluster admin (or the chart) creates it.
        self.api.post("/apis/kopf.dev/v1/clusterkopfpeerings", json={"metadata": {"name": "dbworker-operator"}})  # 409 if there
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(command or [sys.executable, "-m", "dbworker_operator"], env=process_env,
                                        stdout=self._log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self._stopped_at = len(self.log()) if self.process.poll() is None else None
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

    def error_lines(self) -> list[str]:
        """ERROR records and tracebacks the operator logged (a healthy run has none): all but
        kopf's own stream stops (KOPF_STREAM_STOP), and after ``stop``'s SIGTERM its
        watch-stream closes (KOPF_WATCH_CLOSE)."""
        text = self.log()
        cut = len(text) if self._stopped_at is None else self._stopped_at
        kept = [line for record in _records(text[:cut]) if not KOPF_STREAM_STOP.search(record[0]) for line in record]
        kept += [line for record in _records(text[cut:]) if not KOPF_WATCH_CLOSE.search(record[0]) for line in record]
        return [line for line in kept if " ERROR " in line or line.startswith("Traceback")]

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


    def metric(self, name: str, labels: str) -> float:
        """One sample of the operator's own /metrics (0 when absent)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics").text
        for line in text.splitlines():
            if (line.startswith(f"{name}{{") or line.startswith(f"{name} ")) and labels in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def resync_passes(self) -> float:
        return self.metric("dbworker_operator_resync_passes_total", "")

    def requests(self) -> list[tuple[str, str, str, str | None]]:
        """(apiGroup, resource[/subresource], verb, name) of every API request not made by the tests."""
        cluster = self.emulator.cluster
        assert cluster is not None
        requests = self.emulator.call(lambda: list(cluster))
        calls = []
        for request in requests:
            agent = {k.lower(): v for k, v in (request.headers or {}).items()}.get("user-agent", "")
            res = request.resource
            if agent.startswith("python-httpx") or res is None or not res.plural:
                continue
            method = str(request.method.value).upper()
            if method == "GET":
                verb = "watch" if request.params.get("watch") in ("true", "1") else "get" if request.name else "list"
            else:
                verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
            resource = f"{res.plural}/{request.subresource}" if request.subresource else res.plural
            calls.append((res.group or "", resource, verb, request.name))
        return calls

    def api_calls(self) -> set[tuple[str, str, str]]:
        """(apiGroup, resource[/subresource], verb) of every API request not made by the tests."""
        return {(group, resource, verb) for group, resource, verb, _ in self.requests()}

    def wait_live(self) -> None:
        self.wait(lambda: httpx.get(f"http://127.0.0.1:{self.liveness_port}/healthz").status_code == 200,
                  "the operator's liveness endpoint")


def pod(name: str, worker: str, ip: str, **container_status: Any) -> dict[str, Any]:
    """A worker pod as the kubelet would report it (Running, with an IP and one container)."""
    status = {"name": "worker", "ready": True, "state": {"running": {}}, **container_status}
    return {"metadata": {"name": name, "labels": {"app.kubernetes.io/name": "dbworker",
                                                  "app.kubernetes.io/instance": worker}},
            "spec": {"containers": [{"name": "worker", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "containerStatuses": [status]}}


def not_allowed(calls: set[tuple[str, str, str]], rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """The calls no PolicyRule grants (what a real API server would answer 403)."""
    return {(group, resource, verb) for group, resource, verb in calls
            if not any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                       for r in rules)}


# Granted for an authorization check, never a request: with blockOwnerDeletion in an owner
# reference, the OwnerReferencesPermissionEnforcement admission plugin checks this verb.
AUTHORIZATION_ONLY = {("dbworker.dev", "workers/finalizers", "update")}


def never_called(calls: set[tuple[str, str, str]], rules: list[dict[str, Any]], *,
                 not_served: tuple[kinds.Kind, ...] = ()) -> set[tuple[str, str, str]]:
    """What the rules grant that no call used (the other direction of ``not_allowed``), leaving
    out authorization-only grants and the kinds of add-ons this cluster does not serve."""
    unserved = {(kind.group, kind.plural) for kind in not_served}
    granted = {(group, resource, verb) for r in rules for group in r["apiGroups"] for resource in r["resources"]
               for verb in r["verbs"]}
    return {grant for grant in granted - calls - AUTHORIZATION_ONLY if grant[:2] not in unserved}
