"""The console's ASGI application: sign-in in front of the pages, the API and the static files.

``build`` wires it for one Coordinator. Every path but ``/login``, ``/healthz`` and
``/static/`` needs a signed-in caller (a session cookie, or a Bearer token for the API);
without tokens every caller is ``local`` and gets a session at once, but only on a request
naming a loopback host (DNS rebinding). Every response carries the security headers
(``SECURITY_HEADERS``: a CSP that also forbids framing, no MIME sniffing, no referrer to other sites) and
all but the static files ``Cache-Control: no-store`` (pages show source rows). Errors become
a page or ``{"detail": ...}``; database errors are masked with the Coordinator's secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

import dbworker
from dbworker import redact
from dbworker.console import api, auth, pages, tracelinks
from dbworker.console.context import Console

log = logging.getLogger("dbworker.console")

OPEN_PATHS = ("/login", "/healthz")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on form posts,
    # which the cross-site check (auth.same_site) must refuse.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def build(coordinator: dbworker.Coordinator, *, tokens: dict[str, str], read_only: bool,
          trace_url: str | None = None) -> FastAPI:
    """The console over ``coordinator``, signing in with ``tokens`` (name -> secret);
    ``trace_url``: the trace UI's address template (``tracelinks``; ``ValueError`` if wrong)."""
    if trace_url is not None:
        trace_url = tracelinks.check(trace_url)
    application = FastAPI(
        title="dbworker console API",
        version=dbworker.__version__,
        description="Reads and actions on the application's workers. Authorization: Bearer <token>.",
        # The interactive documentation pages load scripts from a CDN: /api/docs is ours instead.
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    console = Console(coordinator=coordinator, auth=auth.Auth(tokens), read_only=read_only, trace_url=trace_url)
    application.state.console = console
    application.mount("/static", StaticFiles(directory=str(Path(__file__).with_name("static"))), name="static")
    application.include_router(api.router)
    application.include_router(pages.router)

    @application.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    @application.middleware("http")
    async def sign_in(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if path in OPEN_PATHS or path.startswith("/static/"):
            return await call_next(request)
        is_api = path.startswith("/api/") and path != "/api/docs"
        who = console.auth.from_bearer(request) if is_api else None
        if who is None and is_api and request.method != "GET" and console.auth.required:
            return _unauthorized("actions need Authorization: Bearer <token>")
        who = who or console.auth.from_cookie(request)
        fresh = None
        if who is None and not console.auth.required:
            who, fresh = console.auth.session(auth.LOCAL)
        if who is None:
            if is_api:
                return _unauthorized("sign in: send Authorization: Bearer <token>")
            target = path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        if is_api and request.method != "GET" and not auth.same_site(request):
            return JSONResponse({"detail": "refused: the request comes from another site"}, status_code=403)
        request.state.who = who
        response = await call_next(request)
        if fresh is not None:
            auth.set_cookie(response, fresh, request)
        return response

    # Added last, so it runs first: every response (a refusal, a redirect, an error page) has them.
    @application.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if not console.auth.required and request.url.path != "/healthz" and not auth.loopback_host(request):
            response: Response = PlainTextResponse(
                "refused: without tokens the console answers requests for a loopback host only "
                "(localhost, 127.0.0.1, [::1]); give it tokens to serve other names",
                status_code=421,
            )
        else:
            response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        if not request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    @application.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(request, exc.status_code, str(exc.detail))

    @application.exception_handler(RequestValidationError)
    async def bad_input(request: Request, exc: RequestValidationError) -> Response:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg', 'invalid')}" for e in exc.errors()
        )
        return _error(request, 422, f"bad input: {fields}")

    @application.exception_handler(sa.exc.SQLAlchemyError)
    async def database_error(request: Request, exc: sa.exc.SQLAlchemyError) -> Response:
        message = redact.describe(exc, coordinator.secrets)
        log.warning("console: database error on %s %s: %s", request.method, request.url.path, message)
        return _error(request, 503, f"database error: {message}")

    return application


def _unauthorized(detail: str) -> Response:
    return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})


def _error(request: Request, status: int, detail: str) -> Response:
    if request.url.path.startswith("/api/") and request.url.path != "/api/docs":
        return JSONResponse({"detail": detail}, status_code=status)
    if getattr(request.state, "who", None) is None and request.url.path not in OPEN_PATHS:
        return PlainTextResponse(detail, status_code=status)
    return pages.render(request, "error.html", status, status=status, detail=detail)
