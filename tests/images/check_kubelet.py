"""A Worker becomes running containers: the operator image against the API emulator, and
tests/images/kubelet.py running the pods of the Deployments it writes with podman."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from examples.imagededup import models, samples
from tests.conftest import Database
from tests.images.kubelet import Kubelet
from tests.k8s.harness import WORKERS, Operator

EXAMPLE = "examples.imagededup.app:coordinator"


@contextmanager
def kubelet_for(op: Operator, tmp: Path) -> Iterator[Kubelet]:
    node = Kubelet(op.api, tmp)
    try:
        yield node
    finally:
        node.close()
    assert not node.errors, node.errors


@pytest.fixture
def kubelet(op: Operator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    with kubelet_for(op, tmp_path_factory.mktemp("kubelet")) as node:
        yield node


def _upload(db: Database, groups: int, seed: int) -> int:
    uploads = samples.generate(groups=groups, seed=seed, with_corrupt=False)
    with Session(db.engine) as s:
        s.add_all(models.Image(filename=u.filename, content=u.content, size_bytes=len(u.content)) for u in uploads)
        s.commit()
    return len(uploads)


def _hashed(db: Database) -> int:
    with Session(db.engine) as s:
        return int(s.scalar(sa.select(sa.func.count()).select_from(models.ImageHash)) or 0)


def test_a_worker_runs_scales_and_stops_as_containers(
        op: Operator, kubelet: Kubelet, images: dict[str, str], pg: Database) -> None:
    models.Base.metadata.create_all(pg.engine)  # the example's tables, as its API creates them
    total = _upload(pg, groups=2, seed=1)
    op.secret("dedup-db", {"url": pg.url})
    op.worker("dedup", image=images["worker"], app=EXAMPLE, workers=["hash"], replicas=1, migrate=True,
              drainSeconds=5)
    op.wait(lambda: _hashed(pg) == total, f"{total} images hashed by the Worker's pod")
    op.wait(lambda: (op.condition("dedup", "Ready") or {}).get("status") == "True", "Ready=True from the pod")
    (first,) = kubelet.pods.values()
    assert first.exits[:1] == [0]  # the init container: `dbworker migrate`

    op.patch(f"{WORKERS}/dedup", {"spec": {"replicas": 2}})
    op.wait(lambda: len(kubelet.containers("dedup")) == 2, "two containers")
    op.wait(lambda: ((op.get(f"{WORKERS}/dedup") or {}).get("status") or {}).get("readyReplicas") == 2,
            "readyReplicas 2 in the Worker's status")
    total += _upload(pg, groups=3, seed=2)
    op.wait(lambda: _hashed(pg) == total, f"{total} images hashed by two pods")

    op.patch(f"{WORKERS}/dedup", {"spec": {"replicas": 1}})
    op.wait(lambda: len(kubelet.stopped) == 1 and len(kubelet.containers("dedup")) == 1, "one pod scaled in")
    assert kubelet.stopped[0].exits[-1] == 0  # SIGTERM: drained and exited 0

    op.delete(f"{WORKERS}/dedup")
    op.wait(lambda: not kubelet.pods, "the Worker's containers gone with its Deployment")
    assert [pod.exits[-1] for pod in kubelet.stopped] == [0, 0]
    # No item lost, none run twice.
    with Session(pg.engine) as s:
        rows = s.execute(sa.text("SELECT execution_status, attempts FROM hash_work")).all()
    assert len(rows) == total and {tuple(r) for r in rows} == {("finished", 1)}


def test_a_missing_secret_degrades_the_worker_from_the_pods_status(
        blind_op: Operator, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> None:
    op = blind_op  # may not read Secrets: only the kubelet's CreateContainerConfigError tells it
    with kubelet_for(op, tmp_path_factory.mktemp("kubelet")) as kubelet:
        op.worker("lost", image=images["worker"], app=EXAMPLE, workers=["hash"], migrate=True)
        op.wait(lambda: (op.condition("lost", "Degraded") or {}).get("reason") == "SecretNotFound",
                "Degraded SecretNotFound from the pod's status")
        assert "create secret generic lost-db" in (op.condition("lost", "Degraded") or {})["message"]
        assert kubelet.containers("lost") == [] and [p.exits for p in kubelet.pods.values()] == [[]]
        op.delete(f"{WORKERS}/lost")
        op.wait(lambda: not kubelet.pods, "the pod gone with its Deployment")
