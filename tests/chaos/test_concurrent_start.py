"""Many pods at once: create_worker_tables() from many processes succeeds in all of them."""

from __future__ import annotations

import os
import subprocess
import sys

import sqlalchemy as sa

from tests.apps import basic
from tests.chaos.conftest import ROOT
from tests.conftest import Database


def test_create_worker_tables_from_many_processes(db: Database) -> None:
    basic.create_app_tables(db.engine)  # the application's own tables exist; ours race
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.apps.runner", db.url, "--create-tables"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-2000:]
        assert out.strip() == "created"
    assert sa.inspect(db.engine).has_table("items_work")
