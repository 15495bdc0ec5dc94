"""The operator image, run as its chart runs it: a bad setting exits 2; against the API
emulator it serves its probe and metrics and turns a Worker into the hardened Deployment."""

from __future__ import annotations

import httpx

from tests.images import podman
from tests.k8s.harness import DEPLOYMENTS, Operator


def test_a_bad_setting_exits_2_naming_it(images: dict[str, str]) -> None:
    result = podman.podman("run", "--rm", *podman.hardened(env={"DBWORKER_OPERATOR_METRICS_PORT": "not-a-port"}),
                           images["operator"], check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "DBWORKER_OPERATOR_METRICS_PORT" in result.stderr


def test_it_serves_probes_and_metrics_and_builds_the_hardened_deployment(op: Operator) -> None:
    assert httpx.get(f"http://127.0.0.1:{op.liveness_port}/healthz").status_code == 200
    op.secret("alpha-db", {"url": "postgresql://app:s3cret@db/app"})
    op.worker("alpha", workers=["hash"], replicas=2)
    dep = op.wait(lambda: op.get(f"{DEPLOYMENTS}/alpha"), "the Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # What tests/images/podman.py's hardened() runs every container with.
    required = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "privileged": False, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    for container in pod["containers"] + pod.get("initContainers", []):
        assert required.items() <= container["securityContext"].items(), container["securityContext"]
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    op.wait(lambda: op.resync_passes() >= 1, "a resync pass in the operator's metrics")
    assert "dbworker_operator_" in httpx.get(f"http://127.0.0.1:{op.metrics_port}/metrics").text
    assert "s3cret" not in op.log()
