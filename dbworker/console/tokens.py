"""The console's sign-in tokens as the command takes them: ``SECRET`` or ``NAME=SECRET``.

A named token's name is who the action log and the pause record say acted (an unnamed one
is ``token``). Pure and free of web dependencies, so the command checks its options
before anything is imported. Errors name the option and the rule, never the secret.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

MIN_SECRET_CHARS = 16
UNNAMED = "token"
_NAMED = re.compile(r"([a-z][a-z0-9_.-]{0,62})=(.*)", re.DOTALL)
_SECRET = re.compile(r"[!-~]+")  # printable ASCII, no spaces


def parse(values: Iterable[str], *, where: str) -> dict[str, str]:
    """Token name -> secret; ``ValueError`` naming ``where`` and the fix for a bad one."""
    tokens: dict[str, str] = {}
    for n, raw in enumerate(values, start=1):
        match = _NAMED.fullmatch(raw)
        name, secret = (match.group(1), match.group(2)) if match else (UNNAMED, raw)
        if len(secret) < MIN_SECRET_CHARS or not _SECRET.fullmatch(secret):
            raise ValueError(
                f"{where}: token {n} is not usable: a token needs at least {MIN_SECRET_CHARS} "
                "printable characters without spaces or commas (e.g. from `openssl rand -hex 32`), "
                "optionally named as NAME=SECRET"
            )
        if name in tokens:
            raise ValueError(f"{where}: two tokens are named {name!r}; give each a name of its own (NAME=SECRET)")
        tokens[name] = secret
    return tokens


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``): reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False
