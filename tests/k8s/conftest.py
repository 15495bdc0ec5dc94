"""tests/k8s runs against operator/ in this checkout, installed (`pip install -e ./operator`) or not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"

if importlib.util.find_spec("dbworker_operator") is None:
    sys.path.insert(0, str(OPERATOR_DIR))
