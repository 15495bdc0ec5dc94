"""The claim-path SQL in ``tests/sql/*.sql`` is what the code compiles, per dialect (no server needed).

A change to a statement shows up as a diff of these files in review; this test fails until
they are regenerated (``python -m tests.sql.write``) and committed with the change.
"""

from __future__ import annotations

import difflib

import pytest

from tests.sql import samples


@pytest.mark.parametrize("name", list(samples.SERVERS))
def test_committed_sql_is_what_the_statements_compile_to(name: str) -> None:
    wanted = samples.compiled(name)
    present = {f: text for f, text in samples.committed().items() if f.endswith(f".{name}.sql")}
    problems = []
    for file in sorted(set(wanted) | set(present)):
        if wanted.get(file) == present.get(file):
            continue
        if file not in wanted:
            problems.append(f"tests/sql/{file}: no such statement any more\n")
            continue
        before = present.get(file, "").splitlines(keepends=True)
        after = wanted[file].splitlines(keepends=True)
        problems.append("".join(difflib.unified_diff(before, after, f"tests/sql/{file} (committed)", f"{file} (compiled)")))
    if problems:
        pytest.fail(
            "".join(problems)
            + f"\nThe claim-path SQL for {name} changed. If that is intended, run `{samples.REGENERATE}`,"
            " review the diff of tests/sql/ and commit it with the change.",
            pytrace=False,
        )


def test_files_are_compiled_with_each_servers_capabilities() -> None:
    files = samples.every_file()
    assert "FOR UPDATE OF items SKIP LOCKED" in files["every.postgresql.sql"]
    assert "FOR UPDATE OF items SKIP LOCKED" in files["every.mysql.sql"]  # MySQL 8.0.1+
    assert "FOR UPDATE SKIP LOCKED" in files["every.mariadb.sql"]  # MariaDB 10.6+: no OF
    assert "FOR UPDATE" not in files["every.sqlite.sql"]
    assert "gen_random_uuid()" in files["one_shot.postgresql.sql"]  # PostgreSQL 13+
    assert not any(f.startswith("one_shot") for f in files if not f.endswith(".postgresql.sql"))
    # Tracing off claims with no join of the trace table; on, the traced variants read it.
    for name in ("one_shot", "one_shot_after", "one_shot_keys"):
        assert "dbworker_traces_items" not in files[f"{name}.postgresql.sql"]
        assert "LEFT OUTER JOIN dbworker_traces_items" in files[f"{name}_traced.postgresql.sql"]
