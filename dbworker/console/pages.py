"""The console's HTML pages (server-rendered with Jinja2; htmx only refreshes them).

Reads: the overview, a worker's items, one item, the confirmation of Retry all, the API
page. Actions are POSTed forms carrying the session's CSRF value; each redirects back to
the page it came from with a short outcome code (``?done=``), so reloading never repeats it.
An item's key travels in its URL percent-encoded whole (``/`` included: ``item_url``), so
any key, slashes, spaces and any Unicode, can be opened and acted on; the keys ``.`` and
``..``, which browsers rewrite out of a path, travel as the query ``?item_id=``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from dbworker.console import actions, auth, filters, queries, sets
from dbworker.console.context import (
    Console,
    acting_on,
    console_of,
    filter_or_400,
    key_or_400,
    who_of,
    worker_or_404,
)

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
TEMPLATES.env.filters["key_url"] = lambda key: quote(str(key), safe="")
DOT_KEYS = (".", "..")  # path segments that URLs resolve away, however they are encoded


def item_url(worker: str, key: Any, action: str = "") -> str:
    """The page of ``worker``'s item ``key`` (with ``action``: its form's target)."""
    text, tail = str(key), f"/{action}" if action else ""
    if text in DOT_KEYS:
        return f"/workers/{worker}/item{tail}?{urlencode({'item_id': text})}"
    return f"/workers/{worker}/items/{quote(text, safe='')}{tail}"


TEMPLATES.env.globals["item_url"] = item_url
router = APIRouter(include_in_schema=False)

# What each outcome code of a redirect says (codes, not text, travel in the URL).
DONE = {
    "retried": "Item reset: it will be claimed again.",
    "not-failed": "That item is not failed: nothing to retry.",
    "cancelled": "Item cancelled.",
    "not-cancelled": "That item is finished or failed already: nothing to cancel.",
    "retried-all": "Failed items reset: they will be claimed again.",
    "paused": "Worker paused: every pod stops claiming for it within a second; running handlers finish.",
    "resumed": "Worker resumed.",
    "acted": "Done: the items the filter matched were changed (see the actions below).",
}

CsrfField = Annotated[str, Form()]
BackField = Annotated[str, Form()]


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    console = console_of(request)
    who = getattr(request.state, "who", None)
    done = DONE.get(request.query_params.get("done", ""))
    return TEMPLATES.TemplateResponse(
        request, template,
        {"who": who, "read_only": console.read_only, "signed": console.auth.required, "done": done, **context},
        status_code=status_code,
    )  # fmt: skip


@router.get("/")
def overview(request: Request) -> Response:
    return render(request, "overview.html", workers=queries.overview(console_of(request).coordinator))


@router.get("/workers/{worker}")
def worker_page(request: Request, worker: str, before: str = "", id: str = "") -> Response:
    console = console_of(request)
    name = worker_or_404(console, worker)
    where = filter_or_400(console, name, request.query_params.multi_items())
    below = key_or_400(console, name, before, field="before") if before else None
    one = key_or_400(console, name, id.strip()) if id.strip() else None  # typed in a search box
    rows, after = queries.items(console.coordinator, name, status=where.status, before=below, source_id=one, where=where)
    return render(
        request, "worker.html", worker=name, status=where.status or "", rows=rows, after=after, search=id,
        paused=queries.paused(console.coordinator, name), filters=queries.FILTERS, where=where,
        query=urlencode(where.params()), given=dict(where.params()),
        columns=[(c.name, filters.describe(c)) for c in filters.offered(console.coordinator.workers[name].source)],
        set_actions=sets.VERBS, audit=sets.recent(console.coordinator, name),
        on_limit=queries.waiting_on_limit(console.coordinator, name),
    )  # fmt: skip


@router.get("/workers/{worker}/act/{action}")
def confirm_set_action(request: Request, worker: str, action: str) -> Response:
    """The confirmation of an action on every item a filter matches, stating the count."""
    console, name = acting_on(request, worker)
    if action not in sets.ACTIONS:
        raise HTTPException(404, f"unknown action {action!r} (one of {', '.join(sets.ACTIONS)})")
    where = filter_or_400(console, name, [(k, v) for k, v in request.query_params.multi_items() if k != "done"])
    return render(request, "confirm_set.html", worker=name, action=action, verb=sets.VERBS[action],
                  applies=sets.ACTIONS[action], where=where, query=urlencode(where.params()),
                  count=sets.count(console.coordinator, name, where, action), cap=sets.COUNT_CAP, batch=sets.BATCH)  # fmt: skip


@router.post("/workers/{worker}/act/{action}")
async def set_action(request: Request, worker: str, action: str) -> Response:
    """Apply an action to every item the posted filter matches (the confirmation's form)."""
    form = await request.form()
    fields = [(k, str(v)) for k, v in form.multi_items()]
    console, name = _acting(request, worker, dict(fields).get("csrf", ""))
    if action not in sets.ACTIONS:
        raise HTTPException(404, f"unknown action {action!r} (one of {', '.join(sets.ACTIONS)})")
    where = filter_or_400(console, name, [(k, v) for k, v in fields if k != "csrf"])
    await run_in_threadpool(sets.act, console.coordinator, name, where, action, who=who_of(request).name)
    return _back(f"/workers/{name}?{urlencode(where.params())}", "acted")


@router.get("/workers/{worker}/items/{item_id:path}")
@router.get("/workers/{worker}/item")  # ?item_id=: any key, "." and ".." included
def item_page(request: Request, worker: str, item_id: str) -> Response:
    console = console_of(request)
    name = worker_or_404(console, worker)
    found = queries.item(console.coordinator, name, key_or_400(console, name, item_id), trace_url=console.trace_url)
    if found is None:
        raise HTTPException(404, f"worker {name!r} has no item {item_id!r} (no work record and no source row)")
    return render(request, "item.html", worker=name, item=found)


@router.get("/workers/{worker}/retry-all")
def confirm_retry_all(request: Request, worker: str) -> Response:
    console, name = acting_on(request, worker)
    return render(request, "confirm.html", worker=name, count=queries.counts(console.coordinator, name)["failed"])


@router.post("/workers/{worker}/items/{item_id:path}/retry")
@router.post("/workers/{worker}/item/retry")
def retry(request: Request, worker: str, item_id: str, csrf: CsrfField = "", back: BackField = "") -> Response:
    console, name = _acting(request, worker, csrf)
    done = actions.retry(console.coordinator, name, key_or_400(console, name, item_id), who=who_of(request).name)
    return _back(back, "retried" if done else "not-failed")


@router.post("/workers/{worker}/items/{item_id:path}/cancel")
@router.post("/workers/{worker}/item/cancel")
def cancel(request: Request, worker: str, item_id: str, csrf: CsrfField = "", back: BackField = "") -> Response:
    console, name = _acting(request, worker, csrf)
    done = actions.cancel(console.coordinator, name, key_or_400(console, name, item_id), who=who_of(request).name)
    return _back(back, "cancelled" if done else "not-cancelled")


@router.post("/workers/{worker}/retry-all")
def retry_all(request: Request, worker: str, csrf: CsrfField = "") -> Response:
    console, name = _acting(request, worker, csrf)
    actions.retry_all(console.coordinator, name, who=who_of(request).name)
    return _back(f"/workers/{name}?status=failed", "retried-all")


@router.post("/workers/{worker}/pause")
def pause(request: Request, worker: str, csrf: CsrfField = "", back: BackField = "") -> Response:
    console, name = _acting(request, worker, csrf)
    actions.pause(console.coordinator, name, who=who_of(request).name)
    return _back(back, "paused")


@router.post("/workers/{worker}/resume")
def resume(request: Request, worker: str, csrf: CsrfField = "", back: BackField = "") -> Response:
    console, name = _acting(request, worker, csrf)
    actions.resume(console.coordinator, name, who=who_of(request).name)
    return _back(back, "resumed")


@router.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    return render(request, "login.html", next=auth.safe_next(next), error=None)


@router.post("/login")
def login(request: Request, token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = "/") -> Response:
    console = console_of(request)
    target = auth.safe_next(next)
    client = _client(request)
    wait = console.throttle.wait(client)
    if wait > 0:
        actions.log.warning("console: sign-in refused (too many failed sign-ins) from %s", client)
        error = f"Too many failed sign-ins from your address: try again in {math.ceil(wait)} seconds."
        response = render(request, "login.html", 429, next=target, error=error)
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response
    name = console.auth.name_of(token.strip()) if token.strip() else None
    if name is None:
        console.throttle.failed(client)
        actions.log.warning("console: sign-in refused (wrong or empty token) from %s", client)
        return render(request, "login.html", 401, next=target, error="That token is not valid. Check it and try again.")
    console.throttle.succeeded(client)
    _, cookie = console.auth.session(name)
    actions.log.info("console: %s signed in from %s", name, _client(request))
    response = RedirectResponse(target, status_code=303)
    auth.set_cookie(response, cookie, request)
    return response


@router.post("/logout")
def logout(request: Request, csrf: CsrfField = "") -> Response:
    _checked(request, csrf)
    console_of(request).auth.revoke(who_of(request))  # a copy of the cookie no longer works
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.COOKIE, path="/")
    return response


@router.get("/api/docs")
def api_docs(request: Request) -> Response:
    spec = request.app.openapi()
    routes = [
        {"method": method.upper(), "path": path, "summary": op.get("summary", ""),
         "parameters": [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]}
        for path, methods in spec.get("paths", {}).items()
        for method, op in methods.items()
    ]  # fmt: skip
    return render(request, "api_docs.html", routes=routes, title=spec.get("info", {}).get("title", ""))


def _acting(request: Request, worker: str, csrf: str) -> tuple[Console, str]:
    console, name = acting_on(request, worker)
    _checked(request, csrf)
    return console, name


def _checked(request: Request, csrf: str) -> None:
    if not auth.same_site(request):
        raise HTTPException(403, "refused: the request comes from another site")
    if not auth.csrf_ok(who_of(request), csrf):
        raise HTTPException(403, "refused: the form's CSRF value is missing or stale; reload the page and try again")


def _back(back: str, done: str) -> Response:
    path, _, query = auth.safe_next(back).partition("?")
    kept = [(k, v) for k, v in parse_qsl(query) if k != "done"]
    return RedirectResponse(f"{path}?{urlencode([*kept, ('done', done)])}", status_code=303)


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"
