"""The HTTP service: upload images, ask for duplicates, watch progress, retry failures.

It only writes rows and reads dbworker's statuses (`execution_status`, `has_execution_status`,
`workers[name].state`, `reset_failed`); it never runs handlers, that is the worker
service's job (`dbworker run examples.imagededup.app:coordinator`). Run it with
`uvicorn examples.imagededup.api:app`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import Depends, FastAPI, File, HTTPException, Query, UploadFile
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus
from examples.imagededup import app as application
from examples.imagededup import models, tracing

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
coordinator = application.coordinator
StatusFilter = Literal["finished", "failed", "pending"]


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # Several API replicas may start at once; creating the schema is idempotent, and a
    # lost race ("already exists") is settled by simply trying again.
    for attempt in range(5):
        try:
            application.create_schema()
            break
        except sa.exc.DatabaseError:
            if attempt == 4:
                raise
            await asyncio.sleep(1 + attempt)
    yield


app = FastAPI(
    title="imagededup", summary="Near-duplicate images, computed by dbworker", lifespan=lifespan
)
tracing.setup_api(app, application.Session)  # OTEL_EXPORTER_OTLP_ENDPOINT set: one trace per upload


def session() -> Iterator[Session]:
    with application.Session() as s:
        yield s


DbSession = Annotated[Session, Depends(session)]


class DuplicateRequest(BaseModel):
    max_distance: int = Field(
        default=10,
        ge=0,
        le=64,
        description="largest pHash Hamming distance that counts as a duplicate",
    )
    page_size: int = Field(
        default=16, ge=1, le=1000, description="candidates compared per handler call"
    )


def status_condition(worker: str, source_id: Any, wanted: StatusFilter) -> sa.ColumnElement[bool]:
    """`wanted` as a condition on dbworker's record; pending = neither finished nor failed."""
    if wanted == "pending":
        settled = [ExecutionStatus.FINISHED, ExecutionStatus.FAILED]
        return ~coordinator.has_execution_status(
            worker=worker, source_id=source_id, statuses=settled
        )
    return coordinator.has_execution_status(
        worker=worker, source_id=source_id, statuses=[ExecutionStatus(wanted)]
    )


def status_text(status: ExecutionStatus | None) -> str:
    return "pending" if status is None else ExecutionStatus(status).value


def failure(worker: str, s: Session, source_id: int) -> dict[str, str | None]:
    """`error`: the exception line of a FAILED item (class and text); `error_detail`: its traceback."""
    state = coordinator.workers[worker].state(s, source_id)
    if state is None or state["execution_status"] != ExecutionStatus.FAILED:
        return {"error": None, "error_detail": None}
    detail = str(state["traceback"] or state["error"] or "")
    lines = [line.strip() for line in detail.splitlines() if line.strip()] or ["no error recorded"]
    # "examples.imagededup.workers.UnreadableImageError: ..." -> "UnreadableImageError: ..."
    return {"error": re.sub(r"^[\w.]+\.(\w+): ", r"\1: ", lines[-1]), "error_detail": detail}


def get_image(s: Session, image_id: int) -> models.Image:
    image = s.get(models.Image, image_id)
    if image is None:
        raise HTTPException(404, f"image {image_id} not found; GET /images lists the uploaded ones")
    return image


def get_query(s: Session, query_id: int) -> models.DuplicateQuery:
    query = s.get(models.DuplicateQuery, query_id)
    if query is None:
        raise HTTPException(404, f"duplicate query {query_id} not found; GET /queries lists them")
    return query


def image_view(s: Session, image: models.Image) -> dict[str, Any]:
    status = coordinator.execution_status(s, worker="hash", source_id=image.id)
    hashed = s.get(models.ImageHash, image.id)
    return {
        "id": image.id,
        "filename": image.filename,
        "size_bytes": image.size_bytes,
        "hash_status": status_text(status),
        "phash": hashed.phash if hashed else None,
        **failure("hash", s, image.id),
    }


def query_view(
    s: Session, query: models.DuplicateQuery, *, with_matches: bool = True
) -> dict[str, Any]:
    status = coordinator.execution_status(s, worker="compare", source_id=query.id)
    view: dict[str, Any] = {
        "id": query.id,
        "image_id": query.image_id,
        "status": status_text(status),
        "pages_done": query.pages_done,
        "pages_total": query.pages_total,
        "compared": query.compared,
        "skipped": query.skipped,
        "max_distance": query.max_distance,
        **failure("compare", s, query.id),
    }
    if with_matches:
        rows = s.execute(
            sa.select(
                models.DuplicateMatch.image_id,
                models.Image.filename,
                models.DuplicateMatch.distance,
            )
            .join(models.Image, models.Image.id == models.DuplicateMatch.image_id)
            .where(models.DuplicateMatch.query_id == query.id)
            .order_by(models.DuplicateMatch.distance, models.DuplicateMatch.image_id)
        ).all()
        view["matches"] = [{"image_id": i, "filename": f, "distance": d} for i, f, d in rows]
        digest = s.get(models.QueryDigest, query.id)  # the async digest worker's read-back
        view["digest"] = None if digest is None else {"matches": digest.matches, "fetched_ms": digest.fetched_ms}
    return view


def read_upload(upload: UploadFile) -> bytes:
    # Endpoints are plain functions (FastAPI runs them in its thread pool), so the
    # database calls never block the event loop; the upload is read the same way.
    content = upload.file.read(MAX_UPLOAD_BYTES + 1)
    if not content:
        raise HTTPException(422, f"file {upload.filename!r} is empty; upload the image's bytes")
    if len(content) > MAX_UPLOAD_BYTES:
        raise HTTPException(
            413,
            f"file {upload.filename!r} is over {MAX_UPLOAD_BYTES} bytes; upload a smaller image",
        )
    return content


@app.get("/healthz")
def healthz(s: DbSession) -> dict[str, bool]:
    s.execute(sa.text("SELECT 1"))
    return {"ok": True}


@app.post("/images", status_code=201)
def upload_images(s: DbSession, files: Annotated[list[UploadFile], File()]) -> list[dict[str, Any]]:
    """Store the uploaded files; inserting the rows is what gives the hash worker its work."""
    images = []
    for upload in files:
        content = read_upload(upload)
        images.append(
            models.Image(
                filename=upload.filename or "upload", content=content, size_bytes=len(content)
            )
        )
    s.add_all(images)
    s.commit()
    return [{"id": image.id, "filename": image.filename} for image in images]


def page(
    s: Session, model: Any, worker: str, wanted: StatusFilter | None, *, limit: int, after: int
) -> list[Any]:
    """One page of ``model`` rows by id, optionally only those whose ``worker`` status is ``wanted``."""
    select = sa.select(model).where(model.id > after).order_by(model.id).limit(limit)
    if wanted is not None:
        select = select.where(status_condition(worker, model.id, wanted))
    return list(s.scalars(select))


def reset_failed(s: Session, worker: str, item_id: int, what: str) -> None:
    """Put a FAILED item of ``worker`` back in line and commit, or answer 409 naming its status."""
    if not coordinator.workers[worker].reset_failed(s, item_id):
        status = coordinator.execution_status(s, worker=worker, source_id=item_id)
        raise HTTPException(409, f"{what} is {status_text(status)}, not failed; nothing to retry")
    s.commit()


@app.get("/images")
def list_images(
    s: DbSession,
    hash_status: StatusFilter | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: int = 0,
) -> list[dict[str, Any]]:
    """Images by id, optionally only those whose hash is finished, failed or pending."""
    images = page(s, models.Image, "hash", hash_status, limit=limit, after=after)
    return [image_view(s, image) for image in images]


@app.get("/images/{image_id}")
def show_image(s: DbSession, image_id: int) -> dict[str, Any]:
    return image_view(s, get_image(s, image_id))


@app.put("/images/{image_id}")
def replace_image(
    s: DbSession, image_id: int, file: Annotated[UploadFile, File()]
) -> dict[str, Any]:
    """Replace the bytes of an image whose hash failed or has not run yet (then retry it)."""
    image = get_image(s, image_id)
    status = coordinator.execution_status(s, worker="hash", source_id=image_id)
    if status not in (None, ExecutionStatus.FAILED):
        raise HTTPException(
            409,
            f"image {image_id}'s hash is {status_text(status)}; only an image whose hash failed can be replaced",
        )
    content = read_upload(file)
    image.content, image.size_bytes = content, len(content)
    s.commit()
    return image_view(s, image)


@app.post("/images/{image_id}/retry")
def retry_image(s: DbSession, image_id: int) -> dict[str, Any]:
    """Put a FAILED hash back in line (dbworker never retries failures by itself)."""
    image = get_image(s, image_id)
    reset_failed(s, "hash", image_id, f"image {image_id}'s hash")
    return image_view(s, image)


@app.post("/images/{image_id}/duplicates", status_code=202)
def ask_duplicates(
    s: DbSession, image_id: int, request: DuplicateRequest | None = None
) -> dict[str, Any]:
    """Start a duplicate query over every image uploaded so far; poll GET /queries/{id}."""
    request = request or DuplicateRequest()
    get_image(s, image_id)
    lowest, highest = s.execute(
        sa.select(sa.func.min(models.Image.id), sa.func.max(models.Image.id))
    ).one()
    start = lowest - 1
    query = models.DuplicateQuery(
        image_id=image_id,
        max_distance=request.max_distance,
        page_size=request.page_size,
        start_after=start,
        upper_id=highest,
        cursor=start,
        pages_done=0,
        compared=0,
        skipped=0,
    )
    s.add(query)
    s.commit()
    return query_view(s, query, with_matches=False)


@app.get("/queries")
def list_queries(
    s: DbSession,
    status: StatusFilter | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: int = 0,
) -> list[dict[str, Any]]:
    """Duplicate queries by id, optionally only the finished, failed or pending ones."""
    queries = page(s, models.DuplicateQuery, "compare", status, limit=limit, after=after)
    return [query_view(s, query) for query in queries]


@app.get("/queries/{query_id}")
def show_query(s: DbSession, query_id: int) -> dict[str, Any]:
    return query_view(s, get_query(s, query_id))


@app.post("/queries/{query_id}/retry")
def retry_query(s: DbSession, query_id: int) -> dict[str, Any]:
    """Put a FAILED duplicate query back in line; it resumes from its last finished page."""
    query = get_query(s, query_id)
    reset_failed(s, "compare", query_id, f"query {query_id}")
    return query_view(s, query)


def counts(s: Session, worker: str, column: Any, model: type[models.Base]) -> dict[str, int]:
    # One statement, so one snapshot: separate counts could see an item finish in between.
    label = sa.case(
        (status_condition(worker, column, "finished"), "finished"),
        (status_condition(worker, column, "failed"), "failed"),
        else_="pending",
    ).label("status")
    rows = s.execute(sa.select(label, sa.func.count()).select_from(model).group_by(label)).all()
    result: dict[str, int] = {"finished": 0, "failed": 0, "pending": 0}
    result.update({status: count for status, count in rows})
    result["total"] = sum(result.values())
    return result


@app.get("/progress")
def progress(s: DbSession) -> dict[str, dict[str, int]]:
    """How many hashes and duplicate queries are finished, failed or still pending."""
    return {
        "hash": counts(s, "hash", models.Image.id, models.Image),
        "compare": counts(s, "compare", models.DuplicateQuery.id, models.DuplicateQuery),
    }
