"""The names dbworker gives what it creates in the database, made to fit every supported one.

PostgreSQL cuts identifiers at 63 bytes (silently: two long names sharing a prefix become
one), MySQL/MariaDB refuse names over 64 characters. A derived name (an index, a trigger
function) that would not fit is cut and given a hash of the whole name, so it stays unique and
the same on every run; a name that fits is left as it is, so existing databases keep theirs.
Names the user chooses (worker names) are checked at registration against ``WORKER_NAME_MAX``.
"""

from __future__ import annotations

import hashlib

IDENTIFIER_MAX = 63  # bytes: PostgreSQL's NAMEDATALEN - 1; MySQL/MariaDB allow 64 characters
_HASH_CHARS = 8

# The longest generated name a worker name is part of is MySQL/MariaDB's name for the
# attempt history table's foreign key, ``<name>_history_ibfk_1``: the server makes it, and
# MariaDB 10.11 refuses it at 64 characters already.
WORKER_NAME_MAX = IDENTIFIER_MAX - len("_history_ibfk_1")


def identifier(name: str) -> str:
    """``name`` if it fits ``IDENTIFIER_MAX`` bytes; else its start, ``_`` and a hash of it all."""
    raw = name.encode()
    if len(raw) <= IDENTIFIER_MAX:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:_HASH_CHARS]
    head = raw[: IDENTIFIER_MAX - _HASH_CHARS - 1].decode(errors="ignore")
    return f"{head}_{digest}"


def check_worker_name_length(name: str) -> None:
    """``ValueError`` naming the limit when worker ``name`` is too long for its tables' names."""
    if len(name) > WORKER_NAME_MAX:
        raise ValueError(
            f"worker name {name!r} is {len(name)} characters: use at most {WORKER_NAME_MAX} (its work "
            f"table {name}_work, its history table and the names the database derives from it must fit MySQL/MariaDB's "
            f"and PostgreSQL's limits, 63)"
        )
