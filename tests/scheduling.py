"""How ``make test`` hands tests to its parallel workers (``-n 4 --dist loadgroup``).

A test at a time to the worker that is free, in collection order (the ``slow`` ones first,
tests/conftest.py), so no worker is left holding a queue of tests at the end while the others
wait; and the modules of ``WHOLE_MODULES`` whole, in order, on one worker: their operators
are module-scoped and their last test checks that the tests before it used every RBAC rule.

This is xdist's ``loadgroup`` with the groups named here: xdist marks a group by appending
``@name`` to the node id, which pytest 9.2's node ids no longer let it do, so the
``xdist_group`` mark is silently ignored.
"""

from __future__ import annotations

from typing import Any

import pytest

WHOLE_MODULES = frozenset({"tests/k8s/test_operator.py", "tests/k8s/test_operator_addons.py"})


def _scheduler_class() -> type:
    from xdist.scheduler import LoadScopeScheduling

    class WholeModulesScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """One work unit per test, but one per module for ``WHOLE_MODULES`` (handed out first:
        xdist orders units by size)."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in WHOLE_MODULES else nodeid

    return WholeModulesScheduling


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    return _scheduler_class()(config, log)
