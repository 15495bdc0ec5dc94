"""The one helper that renders database URLs and error texts without passwords.

Anything that may reach a log line, an error message, a status field or a metric label and
might carry a connection string goes through here first. Texts of any size: ``redact`` cuts
its input to ``MAX_CHARS`` before anything else and then runs in linear time (no pattern that
backtracks), so a handler's megabyte-long message costs milliseconds. ``printable`` makes a
text safe for a terminal (no control sequences).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from sqlalchemy.engine import URL

# The most characters of one text that redact() reads; the rest is cut first, marked by CUT.
# Above the work record's error bound (sql.tables.ERROR_MAX_CHARS), so what is stored is the same.
MAX_CHARS = 64 * 1024
CUT = "\n... (truncated)"
# A secret shorter than this is masked only where it stands as a word of its own: a one-letter
# password masked everywhere would mangle every word ("O***erationalError").
WORD_SECRET_CHARS = 8
MASK = "***"

_TOKEN = re.compile(r"\S+")
_SCHEME_CHAR = re.compile(r"[a-zA-Z0-9+.\-]")
# A quoted value runs to its closing quote or, unclosed, to the end: no alternative is tried
# again after another failed, so each match costs what it reads.
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword[ \t]*=[ \t]*)(?P<pw>'[^']*'?|\"[^\"]*\"?|[^\s&]+)", re.I
)
# C0 controls but tab and newline, DEL, and C1 controls: what a terminal may act on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters (its head, then ``CUT``), or as it is."""
    return text if len(text) <= limit else text[: max(0, limit - len(CUT))] + CUT


def safe_url(url: str | URL) -> str:
    """Render ``url`` with its password masked (``***``): everything between the user's ``:``
    and the last ``@`` before the host, so an unencoded ``@`` in a password hides it whole."""
    return redact(url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url))


def redact(text: str, secrets: tuple[str, ...] = (), *, limit: int = MAX_CHARS) -> str:
    """Mask passwords in ``text``: in URLs, ``password=`` pairs, and any of ``secrets``.

    Cuts ``text`` to ``limit`` characters first; a password or secret the cut ends inside is
    masked too. Linear in what is kept; the result holds at most ``limit`` characters.
    """
    cut = len(text) > limit
    if cut:
        text = text[: max(0, limit - len(CUT))]
    text = _mask_urls(text, cut)
    text = _KEYWORD_PASSWORD.sub(lambda m: f"{m['head']}{MASK}", text)
    for secret in secrets:
        text = _mask_secret(text, secret, cut)
    if cut or len(text) > limit:  # masks are longer than what they hide: the bound still holds
        return text[: max(0, limit - len(CUT))] + CUT
    return text


def printable(text: str) -> str:
    """``text`` with terminal control characters (ESC, CSI, other C0/C1 but newline and tab)
    shown as escapes (``\\x1b``), so a handler's error cannot drive the terminal it is read on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def url_secrets(url: str | URL) -> tuple[str, ...]:
    """The secret parts of ``url`` worth masking wherever they might be echoed: its password
    as written and decoded, read to the last ``@`` before the host, and the pieces between
    its unencoded ``@`` (short ones are masked only as words of their own)."""
    raw = url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url)
    found: list[str] = []
    for token in _TOKEN.findall(raw):
        span = _password_span(token, 0, token.rfind("@"), cut=False)
        if span is not None:
            written = token[span[0] : span[1]]
            # Its pieces too: a parser that stops at the first "@" calls the rest a host name
            # and echoes it in its errors ('could not resolve host "ss@db"').
            found += [unquote(written), written, *written.split("@")]
    return tuple(s for s in dict.fromkeys(found) if s)


def describe(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """One log-friendly line for ``exc``: its type and the first line of its message, masked."""
    lines = clip(str(exc)).strip().splitlines()
    first = lines[0] if lines else ""
    return redact(f"{type(exc).__name__}: {first}", secrets)


def _mask_urls(text: str, cut: bool) -> str:
    """Every URL's password masked; each non-space run is read a bounded number of times."""
    if "://" not in text:
        return text
    end = len(text)
    return _TOKEN.sub(lambda m: _mask_token(m[0], cut and m.end() == end), text)


def _mask_token(token: str, at_cut: bool) -> str:
    parts: list[str] = []
    start = 0
    last_at = token.rfind("@")
    while (span := _password_span(token, start, last_at, cut=at_cut)) is not None:
        parts += [token[start : span[0]], MASK]
        start = span[1]
    return "".join(parts) + token[start:] if parts else token


def _password_span(token: str, start: int, last_at: int, *, cut: bool) -> tuple[int, int] | None:
    """Where the next URL's password in ``token`` (from ``start``) begins and ends
    (``last_at``: where the token's last ``@`` is, -1 for none).

    A URL is ``scheme://user:password@host...``; the user holds no ``:/@``, the password
    runs to the last ``@`` of the token (an unencoded ``@`` in it must not leave its tail
    readable; masking a little of what follows is the safe side). With ``cut``, a password
    the cut ends inside runs to the end.
    """
    while (mark := token.find("://", start)) >= 0:
        begin = mark + 3
        start = begin
        if mark == 0 or not _SCHEME_CHAR.match(token, mark - 1):
            continue
        stop = last_at if last_at >= begin else (len(token) if cut else -1)
        colon = token.find(":", begin, stop) if stop >= 0 else -1
        if colon < 0 or any(c in token[begin:colon] for c in "/@"):
            continue
        return colon + 1, stop
    return None


def _mask_secret(text: str, secret: str, cut: bool) -> str:
    if not secret:
        return text
    if len(secret) >= WORD_SECRET_CHARS:
        text = text.replace(secret, MASK)
    else:
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", MASK, text)
    if cut:  # the cut may end inside the secret: drop the part it left
        for n in range(min(len(secret) - 1, len(text)), 0, -1):
            if text.endswith(secret[:n]):
                return text[:-n] + MASK
    return text
