"""An operator limited to some namespaces (DBWORKER_OPERATOR_NAMESPACES) leaves the others alone."""

from __future__ import annotations

from pathlib import Path

import httpx
from dbworker_operator import install

from tests.k8s import samples
from tests.k8s.emulator import running
from tests.k8s.harness import DEPLOYMENTS, NS, Operator, not_allowed


def test_only_watched_namespaces_are_reconciled(tmp_path: Path) -> None:
    with running() as emulator:
        # Namespaced kopf peers in a KopfPeering of each watched namespace.
        httpx.post(f"{emulator.url}/apis/kopf.dev/v1/namespaces/{NS}/kopfpeerings",
                   json={"metadata": {"name": "dbworker-operator"}}).raise_for_status()
        op = Operator(emulator, tmp_path, env={"DBWORKER_OPERATOR_NAMESPACES": NS})
        try:
            op.wait_live()
            other = samples.minimal("elsewhere", "other")
            del other["metadata"]["uid"], other["metadata"]["generation"]
            op.create("/apis/dbworker.dev/v1alpha1/namespaces/other/workers", other)
            op.secret("mine-db", {"url": "sqlite:///x"})
            op.worker("mine")
            op.wait(lambda: op.get(f"{DEPLOYMENTS}/mine"), "the Deployment in the watched namespace")
            passes = op.resync_passes()
            op.wait(lambda: op.resync_passes() > passes + 2, "a few resync passes")
            assert op.get("/apis/apps/v1/namespaces/other/deployments/elsewhere") is None
            assert "status" not in (op.get("/apis/dbworker.dev/v1alpha1/namespaces/other/workers/elsewhere") or {})
            assert not_allowed(op.api_calls(), install.rbac_rules()) == set()
        finally:
            op.stop()
        assert not op.error_lines(), "\n".join(op.error_lines())
