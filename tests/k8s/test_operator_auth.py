"""The operator keeps working when its credentials rotate (as service account tokens do)."""

from __future__ import annotations

from pathlib import Path

from tests.k8s.emulator import TEST_TOKEN, running
from tests.k8s.harness import DEPLOYMENTS, Operator


def test_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    with running() as emulator:
        assert emulator.cluster is not None
        emulator.call(setattr, emulator.cluster, "token", TEST_TOKEN)
        op = Operator(emulator, tmp_path)
        try:
            op.api.headers["Authorization"] = f"Bearer {TEST_TOKEN}"
            op.api.post("/apis/kopf.dev/v1/clusterkopfpeerings", json={"metadata": {"name": "dbworker-operator"}})
            op.wait_live()
            op.secret("rot-db", {"url": "sqlite:///x"})
            op.worker("rot")
            op.wait(lambda: op.get(f"{DEPLOYMENTS}/rot"), "the Deployment with the first token")

            emulator.kubeconfig(op.kubeconfig, token="rotated-token")  # the kubelet wrote a new token
            emulator.call(setattr, emulator.cluster, "token", "rotated-token")
            op.api.headers["Authorization"] = "Bearer rotated-token"
            op.delete(f"{DEPLOYMENTS}/rot")
            op.wait(lambda: op.get(f"{DEPLOYMENTS}/rot"), "the Deployment restored with the rotated token")
        finally:
            op.stop()
        assert not op.error_lines(), "\n".join(op.error_lines())
