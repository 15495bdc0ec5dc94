"""Links from an attempt to its trace: the trace UI address template of ``--trace-url``.

The template is an http(s) address with ``{trace_id}`` (and optionally ``{span_id}``) where
the ids go, e.g. ``https://grafana.example/explore?traceId={trace_id}`` or
``http://jaeger:16686/trace/{trace_id}``. ``check`` refuses anything else before the console
starts; ``link`` fills it for one attempt. Without a template, pages show the ids as text.
"""

from __future__ import annotations

import string
from urllib.parse import quote, urlsplit

FIELDS = ("trace_id", "span_id")


def check(template: str, *, where: str = "--trace-url") -> str:
    """``template`` stripped, or ``ValueError`` naming ``where`` and the fix."""
    text = template.strip()
    try:
        named = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise ValueError(f"{where}: {text!r} is not an address template ({exc}); "
                         "write the trace id as {trace_id}") from None  # fmt: skip
    unknown = sorted(set(named) - set(FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown field {{{unknown[0]}}} in {text!r}; only {{trace_id}} and {{span_id}} "
                         "are filled (double a brace to keep it: {{ }})")  # fmt: skip
    if "trace_id" not in named:
        raise ValueError(f"{where}: {text!r} has no {{trace_id}}; e.g. http://jaeger:16686/trace/{{trace_id}}")
    parts = urlsplit(text.replace("{", "").replace("}", ""))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{where}: {text!r} is not an http(s) address; e.g. http://jaeger:16686/trace/{{trace_id}}")
    return text


def link(template: str | None, trace_id: str | None, span_id: str | None) -> str | None:
    """The trace's address for an attempt (None without a template or a trace id)."""
    if template is None or not trace_id:
        return None
    return template.format(trace_id=quote(trace_id, safe=""), span_id=quote(span_id or "", safe=""))
