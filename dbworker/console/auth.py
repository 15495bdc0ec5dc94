"""Who is asking: sign-in tokens, the session cookie, bearer tokens and CSRF checks.

Pages sign in once with a token and keep a signed session cookie (HttpOnly,
SameSite=Strict); the API takes ``Authorization: Bearer <token>``. Every page action
carries the session's CSRF value in its form, and no action is taken for a request a
browser marks as coming from another site. Without tokens (a loopback address only, see
``tokens.is_loopback``) every caller is ``local``, and only requests naming a loopback host
are answered (``loopback_host``: a page of another site whose name resolves to 127.0.0.1,
DNS rebinding, gets nothing). Signing out revokes the session in this process (a copy of the
cookie no longer works); failed sign-ins slow their client down (``Throttle``). Secrets are
compared in constant time and never logged or shown.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

from dbworker.console import tokens

COOKIE = "dbworker_console"
SESSION_SECONDS = 12 * 3600
LOCAL = "local"  # who acts when the console runs without tokens
# Signed-out sessions remembered until they would have expired anyway, at most this many (the
# oldest forgotten first; only a signed-in caller can add one).
REVOKED_MAX = 10_000
# Failed sign-ins a client may make before each further one waits, doubling up to the most.
FREE_FAILURES = 5
FAILURE_WAIT_MAX = 300.0
CLIENTS_MAX = 10_000  # clients whose failures are remembered (the oldest forgotten first)


@dataclass(frozen=True)
class Who:
    """A signed-in caller: the token's name, and the session's CSRF value (None for the API)."""

    name: str
    csrf: str | None


class Auth:
    """The console's tokens and the signer of its session cookies."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = dict(tokens)
        # Derived from the tokens: sessions survive restarts and work across replicas, and
        # changing the tokens signs everyone out. Without tokens: a key of this process.
        key = (
            hmac.new(b"dbworker-console", "\n".join(f"{n}={s}" for n, s in sorted(self._tokens.items())).encode(), hashlib.sha256).digest()
            if self._tokens
            else secrets.token_bytes(32)
        )
        self._signer = URLSafeTimedSerializer(key, salt="dbworker-console-session")
        self._revoked: OrderedDict[str, float] = OrderedDict()  # session CSRF value -> its expiry
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether callers must sign in (the console was given tokens)."""
        return bool(self._tokens)

    def name_of(self, given: str) -> str | None:
        """The name of the token ``given`` is, or None; every token is compared (constant time)."""
        found = None
        for name, secret in self._tokens.items():
            if hmac.compare_digest(given.encode(), secret.encode()):
                found = name
        return found

    def session(self, name: str) -> tuple[Who, str]:
        """A new session for ``name``: the caller and its cookie value."""
        who = Who(name, secrets.token_urlsafe(24))
        return who, self._signer.dumps({"n": who.name, "c": who.csrf})

    def from_cookie(self, request: Request) -> Who | None:
        raw = request.cookies.get(COOKIE)
        if not raw:
            return None
        try:
            data = self._signer.loads(raw, max_age=SESSION_SECONDS)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("n"), str) or not isinstance(data.get("c"), str):
            return None
        if self.required and data["n"] not in self._tokens:
            return None  # the token was removed
        with self._lock:
            if data["c"] in self._revoked:
                return None  # signed out
        return Who(data["n"], data["c"])

    def revoke(self, who: Who) -> None:
        """End ``who``'s session: its cookie is refused from now on, wherever it was copied."""
        if who.csrf is None:
            return
        now = time.monotonic()
        with self._lock:
            while self._revoked and (next(iter(self._revoked.values())) <= now or len(self._revoked) >= REVOKED_MAX):
                self._revoked.popitem(last=False)
            self._revoked[who.csrf] = now + SESSION_SECONDS

    def from_bearer(self, request: Request) -> Who | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None
        name = self.name_of(given.strip())
        return None if name is None else Who(name, None)


class Throttle:
    """Failed sign-ins per client: from the ``FREE_FAILURES``-th on, the next attempt waits
    (1 s, doubling up to ``FAILURE_WAIT_MAX``; an attempt while waiting is refused and not
    counted). A sign-in forgets the client's failures. Remembers at most ``CLIENTS_MAX`` clients."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (count, wait until)
        self._lock = threading.Lock()

    def wait(self, client: str) -> float:
        """Seconds ``client`` must wait before its next sign-in is tried (0: now)."""
        with self._lock:
            found = self._failures.get(client)
        return 0.0 if found is None else max(0.0, found[1] - self._clock())

    def __len__(self) -> int:
        """How many clients it remembers (at most ``CLIENTS_MAX``)."""
        return len(self._failures)

    def failed(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            count = self._failures.pop(client, (0, now))[0] + 1
            extra = count - FREE_FAILURES  # the FREE_FAILURES-th failure waits 1 s, each next twice as long
            wait = 0.0 if extra < 0 else min(FAILURE_WAIT_MAX, 2.0 ** min(extra, 16))
            self._failures[client] = (count, now + wait)
            while len(self._failures) > CLIENTS_MAX:
                self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


def loopback_host(request: Request) -> bool:
    """Whether the request's ``Host`` names this machine (localhost, 127.0.0.0/8, [::1])."""
    host = request.headers.get("host", "").strip()
    name = host[1 : host.find("]")] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0]
    return bool(name) and tokens.is_loopback(name.rstrip("."))


def set_cookie(response: object, value: str, request: Request) -> None:
    """Put the session cookie on ``response``: HttpOnly, SameSite=Strict, Secure over HTTPS."""
    response.set_cookie(  # type: ignore[attr-defined]
        COOKIE, value, max_age=SESSION_SECONDS, httponly=True, samesite="strict",
        secure=request.url.scheme == "https", path="/",
    )  # fmt: skip


def csrf_ok(who: Who, given: str | None) -> bool:
    """Whether a form's CSRF value is the session's."""
    return who.csrf is not None and given is not None and hmac.compare_digest(who.csrf.encode(), given.encode())


def same_site(request: Request) -> bool:
    """False when the browser says the request comes from another site (Sec-Fetch-Site, Origin)."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin and origin != "null":
        return urlsplit(origin).netloc == request.headers.get("host", "")
    return origin != "null"


def safe_next(target: str | None) -> str:
    """A redirect target that stays on this console (a path), else ``/``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
