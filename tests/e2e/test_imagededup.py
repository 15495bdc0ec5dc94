"""The example system end to end on SQLite, PostgreSQL and MariaDB: API and `dbworker run`
as separate processes. Uploads generated images with one corrupt file, asks for every
image's duplicates, and checks the groups, the clear failures (the hash, then the query that
needed it), both retries through the API, the worker metrics and a clean SIGTERM stop.
"""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest

from examples.imagededup import samples
from tests.e2e.conftest import System

PAGE_SIZE = 4  # small, so every query takes several handler calls (Unfinished, then Finished)


def upload(system: System, files: list[samples.Sample]) -> dict[int, samples.Sample]:
    response = system.client.post(
        "/images",
        files=[("files", (s.filename, s.content, "application/octet-stream")) for s in files],
    )
    assert response.status_code == 201, response.text
    return {row["id"]: s for row, s in zip(response.json(), files, strict=True)}


def ask(system: System, image_id: int) -> None:
    response = system.client.post(f"/images/{image_id}/duplicates", json={"page_size": PAGE_SIZE})
    assert response.status_code == 202, response.text


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


@pytest.mark.slow
def test_duplicates_failures_and_retries(system: System) -> None:
    missing = system.client.get("/images/999999")
    assert missing.status_code == 404 and "GET /images" in missing.json()["detail"]
    empty = system.client.post("/images", files=[("files", ("empty.png", b"", "image/png"))])
    assert empty.status_code == 422 and "is empty" in empty.json()["detail"]

    uploaded = upload(system, samples.generate(3))
    (corrupt_id,) = (i for i, s in uploaded.items() if s.group is None)
    # Asked before any hash exists: the compare worker's eligible query holds them back.
    for image_id in uploaded:
        ask(system, image_id)
    progress = system.wait_settled("every hash and query to settle")
    assert progress["hash"] == {
        "finished": len(uploaded) - 1,
        "failed": 1,
        "pending": 0,
        "total": len(uploaded),
    }
    assert (
        progress["compare"]["failed"] == 1 and progress["compare"]["finished"] == len(uploaded) - 1
    )

    # The failed hash is listed (has_execution_status) and explained (state()).
    failed = system.client.get("/images", params={"hash_status": "failed"}).json()
    assert [image["id"] for image in failed] == [corrupt_id]
    assert "is not a readable image" in failed[0]["error"]
    assert f"PUT /images/{corrupt_id}" in failed[0]["error"]

    by_image = {
        q["image_id"]: q for q in system.client.get("/queries", params={"limit": 1000}).json()
    }
    assert set(by_image) == set(uploaded)
    corrupt_query = by_image[corrupt_id]
    assert corrupt_query["status"] == "failed"
    assert f"needs the hash of image {corrupt_id}, which failed" in corrupt_query["error"]
    assert f"POST /queries/{corrupt_query['id']}/retry" in corrupt_query["error"]

    for image_id, query in by_image.items():
        if image_id == corrupt_id:
            continue
        group = {i for i, s in uploaded.items() if s.group == uploaded[image_id].group} - {image_id}
        assert query["status"] == "finished"
        assert {m["image_id"] for m in query["matches"]} == group, query
        assert query["pages_done"] == query["pages_total"] > 1
        # Every other image was compared once its hash had settled: only the corrupt one skipped.
        assert (query["compared"], query["skipped"]) == (len(uploaded) - 2, 1), query

    # The async digest worker read every finished query back from the API over HTTP.
    def digested() -> bool:
        done = system.client.get("/queries", params={"limit": 1000, "status": "finished"}).json()
        return len(done) == len(uploaded) - 1 and all(
            q["digest"] is not None and q["digest"]["matches"] == len(q["matches"]) for q in done
        )

    system.wait(digested, what="every finished query digested by the async worker")

    # A retry without a fix fails again; a finished hash has nothing to retry.
    assert system.client.post(f"/images/{corrupt_id}/retry").status_code == 200
    system.wait(
        lambda: system.client.get(f"/images/{corrupt_id}").json()["hash_status"] == "failed",
        timeout=60,
        what="the unfixed image to fail again",
    )
    finished_id = next(i for i in uploaded if i != corrupt_id)
    conflict = system.client.post(f"/images/{finished_id}/retry")
    assert conflict.status_code == 409 and "not failed" in conflict.json()["detail"]
    assert (
        system.client.put(f"/images/{finished_id}", files={"file": ("x.png", b"x")}).status_code
        == 409
    )

    # Fix the bytes, retry the hash and then the query that needed it.
    fixed = samples.replacement()
    assert (
        system.client.put(
            f"/images/{corrupt_id}", files={"file": (fixed.filename, fixed.content)}
        ).status_code
        == 200
    )
    # Reset to unfinished; the worker service may already have claimed or even finished it.
    assert system.client.post(f"/images/{corrupt_id}/retry").json()["hash_status"] in (
        "unfinished",
        "working",
        "finished",
    )
    assert system.client.post(f"/queries/{corrupt_query['id']}/retry").status_code == 200
    progress = system.wait_settled("the retried hash and query")
    assert progress["hash"]["failed"] == 0 and progress["compare"]["failed"] == 0
    retried: dict[str, Any] = system.client.get(f"/queries/{corrupt_query['id']}").json()
    assert retried["status"] == "finished" and retried["matches"] == [] and retried["error"] is None
    assert system.client.get(f"/images/{corrupt_id}").json()["phash"]

    metrics = system.metrics()
    assert metric(metrics, "dbworker_executions_total", worker="hash", outcome="failed") == 2
    assert metric(metrics, "dbworker_executions_total", worker="hash", outcome="finished") == len(
        uploaded
    )
    assert metric(metrics, "dbworker_executions_total", worker="compare", outcome="unfinished") > 0
    assert metric(metrics, "dbworker_executions_total", worker="compare", outcome="failed") == 1
    system.wait(  # the retried query is digested once its compare finished
        lambda: metric(system.metrics(), "dbworker_executions_total", worker="digest", outcome="finished")
        == len(uploaded),
        what="the retried query's digest",
    )
    assert "dbworker_event_loop_lag_seconds" in metrics and "dbworker_items_in_flight" in metrics

    assert system.worker.stop(timeout=40) == 0, system.worker.log_tail()
    # Nothing died, so no claim should ever have waited for its lease to expire.
    log = system.worker.log_path.read_text()
    assert "took over" not in log, system.worker.log_tail(40)
    # uvicorn re-raises SIGTERM once its graceful shutdown is done.
    assert system.api.stop(timeout=40) in (0, -signal.SIGTERM), system.api.log_tail()
