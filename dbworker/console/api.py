"""The JSON API under ``/api/``: the pages' reads and actions, for scripts (Bearer tokens).

Its OpenAPI description is ``/api/openapi.json``, shown as a page at ``/api/docs``.
Errors are ``{"detail": "..."}`` with the status code saying which kind.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from dbworker.console import actions, queries, sets
from dbworker.console.context import (
    acting_on,
    console_of,
    filter_or_400,
    key_or_400,
    who_of,
    worker_or_404,
)

router = APIRouter(prefix="/api", tags=["api"])

StatusFilter = Annotated[str | None, Query(description="only items in this status: failed, working, unfinished or finished")]
Moment = Annotated[str | None, Query(description="ISO 8601 (UTC without an offset), on the item's last change (the "
                                                 "later of its latest claim and its end)")]  # fmt: skip


@router.get("/workers", summary="Every worker: counts, claimable, running by pod, failures in the last hour, pause")
def workers(request: Request) -> dict[str, Any]:
    console = console_of(request)
    return {"workers": [w.as_json() for w in queries.overview(console.coordinator)], "read_only": console.read_only}


@router.get(
    "/workers/{worker}/items",
    summary="A page of a worker's items, newest (highest id) first, filtered by status, time, error and source columns",
    description="Also `col.<column>=<value>` (equals), `col.<column>.gte=` and `col.<column>.lte=` on the source "
    "model's indexed columns (`GET /api/workers` does not list them; a wrong one gets a 400 naming those offered). "
    "Pass the same parameters with `before` for the next page.",
)
def items(
    request: Request,
    worker: str,
    status: StatusFilter = None,
    since: Moment = None,
    until: Moment = None,
    error: Annotated[str | None, Query(description="a substring of the item's error (any case)")] = None,
    before: Annotated[str | None, Query(description="the `next` value of the previous page")] = None,
    id: Annotated[str | None, Query(description="look up this id only")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = queries.PAGE_SIZE,
) -> dict[str, Any]:
    console = console_of(request)
    name = worker_or_404(console, worker)
    where = filter_or_400(console, name, request.query_params.multi_items())
    below = None if before is None else key_or_400(console, name, before, field="before")
    one = None if id is None else key_or_400(console, name, id)
    rows, after = queries.items(console.coordinator, name, status=where.status, before=below, source_id=one,
                                limit=limit, where=where)  # fmt: skip
    return {"worker": name, "status": where.status, "filter": dict(where.params()), "items": rows, "next": after}


@router.get("/workers/{worker}/items/{item_id:path}", summary="One item: its work state and traceback, and its source row")
@router.get("/workers/{worker}/item", summary="One item by ?item_id= (any key, `.` and `..` included)")
def item(request: Request, worker: str, item_id: str) -> dict[str, Any]:
    console = console_of(request)
    name = worker_or_404(console, worker)
    found = queries.item(console.coordinator, name, key_or_400(console, name, item_id), trace_url=console.trace_url)
    if found is None:
        raise HTTPException(404, f"worker {name!r} has no item {item_id!r} (no work record and no source row)")
    found["source"] = None if found["source"] is None else dict(found["source"])
    return found


@router.post("/workers/{worker}/items/{item_id:path}/retry", summary="Reset a failed item so it is claimed again")
@router.post("/workers/{worker}/item/retry", summary="Reset a failed item by ?item_id=")
def retry(request: Request, worker: str, item_id: str) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    key = key_or_400(console, name, item_id)
    return {"retried": actions.retry(console.coordinator, name, key, who=who_of(request).name)}


@router.post("/workers/{worker}/items/{item_id:path}/cancel", summary="Cancel an item that is not finished or failed")
@router.post("/workers/{worker}/item/cancel", summary="Cancel an item by ?item_id=")
def cancel(request: Request, worker: str, item_id: str) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    key = key_or_400(console, name, item_id)
    return {"cancelled": actions.cancel(console.coordinator, name, key, who=who_of(request).name)}


@router.post("/workers/{worker}/retry-all", summary="Reset every failed item of a worker")
def retry_all(request: Request, worker: str) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    return {"retried": actions.retry_all(console.coordinator, name, who=who_of(request).name)}


@router.post(
    "/workers/{worker}/act/{action}",
    summary="Retry, cancel or run again every item the filter matches (the items endpoint's parameters), in batches",
    description="`action`: `retry` (failed items), `cancel` (working and unfinished ones) or `run-again` (finished and "
    "failed ones). Answers how many changed; `dry_run=true` only counts (up to 100,000, then 100,001). Each action "
    "leaves an audit line (`GET /api/workers/{worker}/actions`).",
)
def act(request: Request, worker: str, action: str, dry_run: bool = False) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    if action not in sets.ACTIONS:
        raise HTTPException(404, f"unknown action {action!r} (one of {', '.join(sets.ACTIONS)})")
    where = filter_or_400(console, name, [(k, v) for k, v in request.query_params.multi_items() if k != "dry_run"])
    if dry_run:
        return {"action": action, "filter": dict(where.params()), "matching": sets.count(console.coordinator, name, where, action)}
    changed = sets.act(console.coordinator, name, where, action, who=who_of(request).name)
    return {"action": action, "filter": dict(where.params()), "changed": changed}


@router.get("/workers/{worker}/actions", summary="The latest actions on sets of a worker's items: who, filter, how many")
def set_actions(request: Request, worker: str) -> dict[str, Any]:
    console = console_of(request)
    name = worker_or_404(console, worker)
    return {"worker": name, "actions": sets.recent(console.coordinator, name)}


@router.get("/workers/{worker}/limits", summary="A worker with limits: items waiting on a limit and the keys most behind")
def limits(request: Request, worker: str) -> dict[str, Any]:
    console = console_of(request)
    name = worker_or_404(console, worker)
    return {"worker": name, "waiting_on_limit": queries.waiting_on_limit(console.coordinator, name)}


@router.post("/workers/{worker}/pause", summary="Stop claiming for a worker in every pod (running handlers finish)")
def pause(request: Request, worker: str) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    return {"paused": True, "changed": actions.pause(console.coordinator, name, who=who_of(request).name)}


@router.post("/workers/{worker}/resume", summary="Resume claiming for a paused worker in every pod")
def resume(request: Request, worker: str) -> dict[str, Any]:
    console, name = acting_on(request, worker)
    return {"paused": False, "changed": actions.resume(console.coordinator, name, who=who_of(request).name)}
