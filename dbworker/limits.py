"""``Limit``: a fleet-wide concurrency and/or rate limit of a worker, per key of its source rows.

Plain data and its checks (``transactional_worker(limits=[...])``), and the pure rules the
claim engine applies (which slot kinds a limit has, how a key value becomes the text stored in
the slots table, how many candidates per key a round looks at). Enforcement is
``sql.slots``' and ``sql.limited``'s; the semantics are docs/limits.md's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbworker import bounds

# Starts per period are counted in slot rows (one per start in the window): keep that bounded.
RATE = bounds.Bound(10_000, "", "10000", "use a shorter per= with a smaller rate")
PER = bounds.Bound(bounds.DAY_SECONDS, "seconds", "1 day", "use a shorter period")
# A key's text is stored in the slots table's primary key (MariaDB: 191 characters of utf8mb4
# fit an index); longer texts are kept as a prefix and a hash of the whole.
KEY_CHARS = 191
_HASHED_PREFIX = KEY_CHARS - 41  # prefix, "#", 40 hex digits


@dataclass(frozen=True)
class Limit:
    """At most ``concurrency`` items with the same ``key`` running at once, and at most ``rate``
    starts per ``per`` seconds with the same ``key``, across every pod of the fleet.

    ``key``: a column or SQL expression of the worker's source model (``Order.customer_id``);
    None: one key for the whole worker. At least one of ``concurrency`` and ``rate`` is given;
    each is a positive integer. ``per`` is seconds (default 1.0). Bad values raise
    ``ValueError`` naming the field.
    """

    key: Any = None
    concurrency: int | None = None
    rate: int | None = None
    per: float = 1.0

    def __post_init__(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise ValueError("Limit needs concurrency= or rate= (or both): e.g. Limit(key=Order.customer_id, concurrency=2)")
        for field, value, bound in (("concurrency", self.concurrency, bounds.CONCURRENCY), ("rate", self.rate, RATE)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limit {field} must be None or an integer >= 1, got {value!r}")
            bounds.check(value, bound, field=f"Limit {field}")
        per = self.per
        if isinstance(per, bool) or not isinstance(per, int | float) or not 0 < per < math.inf:
            raise ValueError(f"Limit per must be a positive number of seconds, got {per!r}")
        bounds.check(per, PER, field="Limit per")
        if per < 0.001:
            raise ValueError(f"Limit per must be at least 0.001 seconds (the database clock's resolution), got {per!r}")
        object.__setattr__(self, "per", float(per))

    @property
    def keyed(self) -> bool:
        return self.key is not None


@dataclass(frozen=True)
class Kind:
    """One slot kind of a limit, as the slots table stores it: ``number`` (the limit's position
    times two, plus 1 for rate), ``size`` slots, and for rate the window in seconds."""

    number: int
    limit: int  # index of the Limit in the worker's list (its key column in a round)
    size: int
    per: float | None = None  # None: concurrency (a slot is held while its item runs)


def kinds(limits: Sequence[Limit]) -> list[Kind]:
    """Every slot kind of ``limits``, concurrency kinds first (a rate slot is spent only once
    every concurrency slot of the item was won)."""
    found = [Kind(2 * n, n, lim.concurrency) for n, lim in enumerate(limits) if lim.concurrency is not None]
    found += [Kind(2 * n + 1, n, lim.rate, lim.per) for n, lim in enumerate(limits) if lim.rate is not None]
    return found


def fair_limit(limits: Sequence[Limit]) -> int | None:
    """The limit whose keys claims take turns between (docs/limits.md): the first keyed one."""
    return next((n for n, lim in enumerate(limits) if lim.keyed), None)


def per_key(limits: Sequence[Limit], fair: int | None, wanted: int) -> int:
    """How many candidates of one key a round looks at: no key can start more than the
    smallest of its limit's numbers now."""
    if fair is None:
        return wanted
    lim = limits[fair]
    return min(wanted, *(n for n in (lim.concurrency, lim.rate) if n is not None))


def key_text(value: object) -> str:
    """A key's text (as the database cast it; None, SQL NULL, is '') as the slots table keeps it."""
    text = "" if value is None else str(value)
    if len(text) <= KEY_CHARS:
        return text
    return text[:_HASHED_PREFIX] + "#" + hashlib.sha1(text.encode()).hexdigest()


def check_limits(limits: object, source_table: Any) -> tuple[Limit, ...]:
    """``transactional_worker(limits=...)`` as a tuple; ``ValueError`` naming what is wrong."""
    if limits is None:
        return ()
    if isinstance(limits, Limit) or not isinstance(limits, list | tuple):
        raise ValueError(f"limits must be a list of dbworker.Limit, got {limits!r}")
    for lim in limits:
        if not isinstance(lim, Limit):
            raise ValueError(f"limits must hold only dbworker.Limit(...), got {lim!r}")
        if lim.keyed:
            _check_key(lim.key, source_table)
    return tuple(limits)


def _check_key(key: object, source_table: Any) -> None:
    froms = getattr(key, "_from_objects", None)  # a SQL expression's tables (SQLAlchemy's)
    if froms is None or not hasattr(key, "label"):
        raise ValueError(f"Limit key must be a column or SQL expression of the source model, got {key!r}")
    others = [getattr(t, "name", str(t)) for t in froms if getattr(t, "name", None) != source_table.name]
    if others:
        raise ValueError(
            f"Limit key must use only the source table {source_table.name}'s columns; it uses {', '.join(others)}"
        )
