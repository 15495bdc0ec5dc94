"""The one helper that renders database URLs and error texts without passwords.

Anything that may reach a log line, an error message, a status field or a metric label and
might carry a connection string goes through here first.
"""

from __future__ import annotations

import re

from sqlalchemy.engine import URL, make_url

# The password runs to the last "@" of the URL (greedy): an unencoded "@" inside it must not
# leave its tail readable; masking a little of what follows is the safe side.
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)(?P<pw>\S+)(?P<tail>@)")
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'[^']*'|\"[^\"]*\"|[^\s&]+)", re.I)


def safe_url(url: str | URL) -> str:
    """Render ``url`` with its password masked (``***``)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return redact(str(url))


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Mask passwords in ``text``: in URLs, ``password=`` pairs, and any of ``secrets``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}***{m['tail']}", text)
    text = _KEYWORD_PASSWORD.sub(lambda m: f"{m['head']}***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def url_secrets(url: str | URL) -> tuple[str, ...]:
    """The secret parts of ``url`` worth masking wherever they might be echoed."""
    try:
        password = make_url(url).password
    except Exception:
        return ()
    return (str(password),) if password else ()


def describe(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """One log-friendly line for ``exc``: its type and the first line of its message, masked."""
    message = str(exc).strip().splitlines()
    first = message[0] if message else ""
    return redact(f"{type(exc).__name__}: {first}", secrets)
