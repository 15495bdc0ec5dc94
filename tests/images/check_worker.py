"""The worker image (examples/imagededup/deploy/Dockerfile) run as the operator's pods run it,
on this machine's PostgreSQL: migrate as the init container, real work, probes, SIGTERM."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from examples.imagededup import models, samples
from tests.apps import basic
from tests.conftest import Database
from tests.images import podman
from tests.k8s.harness import free_port

EXAMPLE = "examples.imagededup.app:coordinator"
TEST_APP = "tests.images.app:coordinator"
# The repository's tests/ beside the image's /app, read-only, for tests.images.app.
TEST_CODE = {str(podman.ROOT / "tests"): "/srv/tests"}


def _worker(images: dict[str, str], db: Database, app: str, tmp_path: Path, **env: str) -> podman.Container:
    """`dbworker run APP` with the environment the operator's Deployment gives it."""
    env = {"DATABASE_URL": db.url, "DBWORKER_METRICS_PORT": str(free_port()), "DBWORKER_LOG_FORMAT": "json", **env}
    volumes = {}
    if app == TEST_APP:
        env["PYTHONPATH"] = "/app:/srv"
        volumes = TEST_CODE
    return podman.Container(images["worker"], "dbworker", "run", app, env=env, volumes=volumes,
                            termination_log=tmp_path / "termination-log")


def test_migrate_then_run_processes_real_work_hardened(images: dict[str, str], pg: Database, tmp_path: Path) -> None:
    models.Base.metadata.create_all(pg.engine)  # the example's own tables; the image's migrate adds dbworker's
    migrate = podman.run_once(images["worker"], "dbworker", "migrate", EXAMPLE, env={"DATABASE_URL": pg.url})
    assert migrate.returncode == 0, migrate.stdout
    assert {"hash_work", "compare_work"} <= set(sa.inspect(pg.engine).get_table_names())
    uploads = samples.generate(groups=2, with_corrupt=False)
    with Session(pg.engine) as s:
        s.add_all(models.Image(filename=u.filename, content=u.content, size_bytes=len(u.content)) for u in uploads)
        s.commit()

    worker = _worker(images, pg, EXAMPLE, tmp_path, DBWORKER_WORKER="hash")
    try:
        worker.wait_for(lambda: worker.get("/readyz")[0] == 200, "/readyz 200")
        assert worker.get("/healthz")[0] == 200
        # Seen from the host: the image's user, no capabilities, no privilege gain, a seccomp
        # filter, and a read-only root.
        status = worker.proc_status()
        assert status["Uid"].split() == ["10001"] * 4 and status["Gid"].split() == ["10001"] * 4
        assert {status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
        assert "ro" in worker.root_mount_options()
        worker.wait_for(lambda: _count(pg, sa.select(sa.func.count()).select_from(models.ImageHash)) == len(uploads),
                        f"{len(uploads)} images hashed")
        assert worker.value("dbworker_executions_total", worker="hash", outcome="finished") == len(uploads)
        stop = worker.stop(grace=60)
        assert worker.wait() == 0, worker.logs()[-3000:]
        stop.wait(30)
    finally:
        worker.remove()


def _count(db: Database, query: sa.Select[int]) -> int:
    with Session(db.engine) as s:
        return int(s.scalar(query) or 0)


def _started(db: Database, item_id: int) -> bool:
    return _count(db, sa.select(sa.func.count()).select_from(basic.Started).where(basic.Started.item_id == item_id)) > 0


def test_sigterm_drains_the_running_handler_and_exits_0(images: dict[str, str], pg: Database, tmp_path: Path) -> None:
    basic.build(pg.url).engine.dispose()  # the test application's tables and work tables
    (item,) = basic.add_items(pg.engine, ["dbwait"])
    worker = _worker(images, pg, TEST_APP, tmp_path, DBWORKER_DRAIN_SECONDS="120")
    try:
        worker.wait_for(lambda: _started(pg, item), "the handler running")
        stop = worker.stop(grace=150)  # podman stop: SIGTERM, SIGKILL only after 150 s
        worker.wait_for(lambda: worker.get("/readyz") == (503, "draining\n"), "/readyz draining")
        assert worker.value("dbworker_handlers_active", worker="items") == 1  # the drain waits for it
        with Session(pg.engine) as s:
            s.execute(sa.update(basic.Item).where(basic.Item.id == item).values(release=True))
            s.commit()
        assert worker.wait(timeout=120) == 0, worker.logs()[-3000:]
        stop.wait(30)
        assert _count(pg, sa.select(sa.func.count()).select_from(basic.Output).where(basic.Output.item_id == item)) == 1
    finally:
        worker.remove()


def test_past_the_drain_deadline_the_handler_is_ended_and_exit_is_0(
        images: dict[str, str], pg: Database, tmp_path: Path) -> None:
    coordinator = basic.build(pg.url)
    (item,) = basic.add_items(pg.engine, ["hang"])  # ignores SIGTERM, never returns
    worker = _worker(images, pg, TEST_APP, tmp_path, DBWORKER_DRAIN_SECONDS="2")
    try:
        worker.wait_for(lambda: _started(pg, item), "the handler running")
        stop = worker.stop(grace=120)
        assert worker.wait(timeout=100) == 0, worker.logs()[-3000:]  # well before podman's SIGKILL
        stop.wait(30)
        with Session(coordinator.engine) as s:
            state = coordinator.workers["items"].state(s, item)
        assert state is not None
        assert str(state["execution_status"]) != "finished"
        # The claim is released: no live lease keeps another pod from claiming the item.
        expires = state["lease_expires_at"]
        assert expires is None or expires <= dt.datetime.now(dt.UTC).replace(tzinfo=None), state
    finally:
        worker.remove()
        coordinator.engine.dispose()


def test_an_unreachable_database_exits_3_with_the_reason_in_the_termination_log(
        images: dict[str, str], tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"  # nothing listens there
    log = tmp_path / "termination-log"
    result = podman.run_once(images["worker"], "dbworker", "run", EXAMPLE, env={"DATABASE_URL": url},
                             termination_log=log)
    assert result.returncode == 3, result.stdout
    assert log.read_text().startswith("dbworker[DatabaseUnreachable]: "), log.read_text()
