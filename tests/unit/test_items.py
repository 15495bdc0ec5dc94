"""The item state diagram in docs/design.md and ``sql.items``' transitions are the same."""

from __future__ import annotations

import pathlib
import re

from dbworker.contract import ExecutionStatus
from dbworker.sql import items

DESIGN = pathlib.Path(__file__).resolve().parents[2] / "docs" / "design.md"
ARROW = re.compile(r"^\s*(\S+)\s*-->\s*(\S+)\s*:\s*(\w+)\s*$")


def diagram_arrows() -> set[tuple[str, str, str]]:
    text = DESIGN.read_text()
    start = text.index("## The states of one item")
    block = text[text.index("```mermaid", start) : text.index("```\n", text.index("```mermaid", start) + 3)]
    arrows = {m.groups() for line in block.splitlines() if (m := ARROW.match(line))}
    assert arrows, "no arrows found in the state diagram"
    return {(a, b, name) for a, b, name in arrows}


def module_arrows() -> set[tuple[str, str, str]]:
    return {(src, dst, name) for name, (sources, dst) in items.TRANSITIONS.items() for src in sources}


def test_the_state_diagram_draws_exactly_the_transitions_of_sql_items() -> None:
    assert diagram_arrows() == module_arrows()


def test_every_transition_is_a_function_of_sql_items_and_every_state_a_status() -> None:
    statuses = {s.value for s in ExecutionStatus} | {items.NEW}
    for name, (sources, dst) in items.TRANSITIONS.items():
        assert callable(getattr(items, name, None)), name
        assert set(sources) | {dst} <= statuses, name
