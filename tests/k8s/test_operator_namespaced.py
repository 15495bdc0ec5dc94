"""An operator limited to some namespaces (DBWORKER_OPERATOR_NAMESPACES) leaves the others alone,
reads no Secret it was not granted, and patches no pod when deletion costs are off."""

from __future__ import annotations

from pathlib import Path

import httpx
from dbworker_operator import install

from tests.k8s import samples
from tests.k8s.emulator import running
from tests.k8s.harness import DEPLOYMENTS, NS, PODS, FakePod, Operator, free_port, not_allowed, pod


def test_only_watched_namespaces_are_reconciled(tmp_path: Path) -> None:
    port = free_port("127.0.0.4")
    metrics = FakePod("127.0.0.4", port)
    metrics.text = 'dbworker_backlog{worker="hash"} 4\ndbworker_handlers_active{worker="hash"} 2\n'
    with running(version=("1", "25")) as emulator:
        # Namespaced kopf peers in a KopfPeering of each watched namespace.
        httpx.post(f"{emulator.url}/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings",
                   json={"metadata": {"name": "dbworker-operator"}}).raise_for_status()
        op = Operator(emulator, tmp_path, env={"DBWORKER_OPERATOR_NAMESPACES": NS,
                                               "DBWORKER_OPERATOR_DELETION_COST": "false"})
        try:
            op.wait_live()
            other = samples.minimal("elsewhere", "other")
            del other["metadata"]["uid"], other["metadata"]["generation"]
            op.create("/apis/dbworker.dev/v1alpha1/namespaces/other/workers", other)
            # No Secret at all, and no right to read Secrets: the Deployment is built, and the
            # pods' CreateContainerConfigError names the problem with the same reason.
            op.worker("mine", metrics={"port": port}, disruptionBudget={"maxUnavailable": 1})
            op.wait(lambda: op.get(f"{DEPLOYMENTS}/mine"), "the Deployment in the watched namespace")
            pdb = op.wait(lambda: op.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/mine"), "the PDB")
            assert "unhealthyPodEvictionPolicy" not in pdb["spec"], "Kubernetes 1.25 has no such field"
            status = {"ready": False, "state": {"waiting": {"reason": "CreateContainerConfigError",
                                                            "message": 'secret "mine-db" not found'}}}
            op.create(PODS, pod("mine-abc-1", "mine", "127.0.0.4", **status))
            op.wait(lambda: (op.condition("mine", "Degraded") or {}).get("reason") == "SecretNotFound",
                    "SecretNotFound read from the pod")
            assert "create secret generic mine-db" in (op.condition("mine", "Degraded") or {})["message"]
            op.wait(lambda: metrics.headers, "the pod scraped")
            passes = op.resync_passes()
            op.wait(lambda: op.resync_passes() > passes + 2, "a few resync passes")
            annotations = (op.get(f"{PODS}/mine-abc-1") or {})["metadata"].get("annotations") or {}
            assert "controller.kubernetes.io/pod-deletion-cost" not in annotations, "deletion costs are off"
            assert op.get("/apis/apps/v1/namespaces/other/deployments/elsewhere") is None
            assert "status" not in (op.get("/apis/dbworker.dev/v1alpha1/namespaces/other/workers/elsewhere") or {})
            calls = op.api_calls()
            assert not_allowed(calls, install.rbac_rules(scope="namespaced", deletion_cost=False)) == set()
            # What differs by scope, both ways: the namespaced peering and namespaces, nothing cluster-wide.
            assert {("kopf.dev", "kopfpeerings", verb) for verb in ("get", "list", "watch", "patch")} <= calls
            assert {("", "namespaces", "list"), ("", "namespaces", "watch")} <= calls
            assert not {c for c in calls if c[1] in ("clusterkopfpeerings", "secrets")}
        finally:
            op.stop()
            metrics.close()
        assert not op.error_lines(), "\n".join(op.error_lines())
