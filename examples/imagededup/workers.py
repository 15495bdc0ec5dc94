"""The handlers dbworker runs in its handler processes: hash an image, compare a page, and
(``async def``) read a finished query back from the API.

Module-level functions, because dbworker pickles them by reference to its child
processes. They only read and write through the session they are given; dbworker
commits those writes together with the outcome they return. `app` registers them.
"""

from __future__ import annotations

import io
import os
import time

import imagehash
import PIL.Image
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from dbworker import ExecutionStatus, Finished, Outcome, Unfinished
from examples.imagededup import models


class UnreadableImageError(ValueError):
    """The uploaded bytes are not an image Pillow can decode."""


class HashFailedError(RuntimeError):
    """A duplicate query cannot run because its own image's hash failed."""


def unreadable(image_id: int, filename: str, reason: str) -> str:
    return (
        f"image {image_id} ({filename!r}) is not a readable image ({reason}); upload a valid "
        f"PNG or JPEG with PUT /images/{image_id}, then POST /images/{image_id}/retry"
    )


def hash_image(image: models.Image, session: Session) -> Outcome:
    """Compute and store the perceptual hash (pHash, 64 bits) of one uploaded image.

    Raises UnreadableImageError for bytes Pillow cannot decode; dbworker then marks the
    image's hash FAILED with that message, until the API's retry resets it.
    """
    image_id, filename, content = image.id, image.filename, image.content
    # Release the read transaction (on SQLite, the file's read lock) while decoding.
    session.rollback()
    try:
        with PIL.Image.open(io.BytesIO(content)) as picture:
            picture.load()
            value = imagehash.phash(picture)
            width, height = picture.size
    except PIL.UnidentifiedImageError:
        raise UnreadableImageError(
            unreadable(image_id, filename, "not a known image format")
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:  # what Pillow raises for damaged files
        raise UnreadableImageError(
            unreadable(image_id, filename, f"{type(exc).__name__}: {exc}")
        ) from None
    row = session.get(models.ImageHash, image_id) or models.ImageHash(image_id=image_id)
    row.phash, row.width, row.height = str(value), width, height
    session.add(row)
    return Finished()


def compare_page(query: models.DuplicateQuery, session: Session) -> Outcome:
    """Compare the query's image with the next page of candidates; Finished after the last.

    Candidates whose own hash failed are counted in `skipped` rather than failing the
    query: one bad upload must not block everybody's search. The query's own image is
    different: without its hash there is nothing to compare, so that raises
    HashFailedError naming the image, the hash's error and how to retry.
    """
    own = session.get(models.ImageHash, query.image_id)
    if own is None:
        # Imported here because `app` imports this module to register the handlers.
        from examples.imagededup.app import coordinator

        state = coordinator.workers["hash"].state(session, query.image_id)
        if state is None or state["execution_status"] != ExecutionStatus.FAILED:
            # The hash was reset for a retry after this query became eligible: the
            # eligible query holds the query back again until that hash settles.
            return Unfinished()
        raise HashFailedError(
            f"duplicate query {query.id} needs the hash of image {query.image_id}, which failed "
            f"(GET /images/{query.image_id} says why); fix that image and retry its hash, "
            f"then retry this query with POST /queries/{query.id}/retry"
        )
    target = imagehash.hex_to_hash(own.phash)
    page_end = min(query.cursor + query.page_size, query.upper_id)
    candidates = session.execute(
        sa.select(models.Image.id, models.ImageHash.phash)
        .outerjoin(models.ImageHash, models.ImageHash.image_id == models.Image.id)
        .where(
            models.Image.id > query.cursor,
            models.Image.id <= page_end,
            models.Image.id != query.image_id,
        )
        .order_by(models.Image.id)
    ).all()
    for image_id, phash in candidates:
        if phash is None:
            query.skipped += 1
            continue
        query.compared += 1
        distance = int(target - imagehash.hex_to_hash(phash))
        if distance <= query.max_distance:
            session.merge(
                models.DuplicateMatch(query_id=query.id, image_id=image_id, distance=distance)
            )
    query.cursor = page_end
    query.pages_done += 1
    return Finished() if page_end >= query.upper_id else Unfinished()


API_URL_VARIABLE = "IMAGEDEDUP_API_URL"  # where the digest worker reaches the API, e.g. http://api:8000


async def digest_query(query: models.DuplicateQuery, session: AsyncSession) -> Outcome:
    """Read a finished duplicate query back from the API over HTTP and record what it says.

    An ``async def`` handler: dbworker runs many at once as coroutines of one handler process,
    none holding a database connection while it waits for the API; the digest row is
    committed with the outcome. An API that does not answer fails the attempt (retried by
    the worker's Retry)."""
    import httpx  # the API's own dependency: only the worker service that runs this needs it

    base = os.environ.get(API_URL_VARIABLE)
    if not base:
        raise RuntimeError(f"{API_URL_VARIABLE} is not set: set it to the API's URL (e.g. http://127.0.0.1:8000)")
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        response = await client.get(f"/queries/{query.id}")
        response.raise_for_status()
    matches = len(response.json()["matches"])
    session.add(models.QueryDigest(query_id=query.id, matches=matches,
                                   fetched_ms=round((time.perf_counter() - started) * 1000)))  # fmt: skip
    return Finished()
