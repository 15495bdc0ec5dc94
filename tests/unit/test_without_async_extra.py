"""dbworker imports and runs sync workers without the `async` extra (no greenlet, so no
SQLAlchemy asyncio): the worker image and applications without async handlers lack it."""

from __future__ import annotations

import subprocess
import sys

BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "greenlet" or name.startswith("greenlet."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Block())
for name in [m for m in sys.modules if m.startswith(("greenlet", "sqlalchemy.ext.asyncio"))]:
    del sys.modules[name]
"""


def test_dbworker_and_its_command_import_without_greenlet() -> None:
    code = BLOCK + (
        "import dbworker, dbworker.loop, dbworker.aiopool, dbworker.aiochild, dbworker.pod.cli, dbworker.testing\n"
        "from dbworker import Coordinator\n"
        "from sqlalchemy.orm import sessionmaker\n"
        "import sqlalchemy as sa\n"
        "Coordinator(sessionmaker(sa.create_engine('sqlite://')), database_url='sqlite://')\n"
        "try:\n"
        "    import sqlalchemy.ext.asyncio\n"
        "except ImportError:\n"
        "    print('blocked')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "blocked"  # the block held: nothing above needed it
