"""Unit tests of what a handler process records for a failure: 0.0.1's error text, a masked traceback."""

from __future__ import annotations

import datetime as dt
import os

import dbworker
from dbworker.child import ChildConfig, Runner
from tests.apps import basic

URL = "postgresql+psycopg://app:hunter2@db.internal/app"


def runner() -> Runner:
    config = ChildConfig(worker="items", database_url=URL, engine_options={}, handler=basic.handle,
                         source=basic.Item, parent_pid=os.getpid())  # fmt: skip
    return Runner(config)  # builds an engine; connects to nothing


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_the_error_is_the_exception_text_and_the_traceback_is_kept_beside_it() -> None:
    r = runner()
    error, trace = r.describe(raised(RuntimeError("boom")))
    assert error == "boom"
    assert trace.startswith("Traceback") and "RuntimeError: boom" in trace
    assert r.describe(raised(KeyboardInterrupt()))[0] == "KeyboardInterrupt"  # empty text: the class name


def test_neither_the_error_nor_the_traceback_shows_the_password() -> None:
    error, trace = runner().describe(raised(RuntimeError(f"cannot reach {URL} (password=hunter2)")))
    assert "hunter2" not in error and "hunter2" not in trace
    assert "db.internal" in error


def test_names_earlier_releases_exported_still_import() -> None:
    from dbworker import Claim, Handler, LostClaim, now

    claim = Claim(7, "token")
    assert (claim.source_id, claim.token, claim.taken_over) == (7, "token", False)
    assert issubclass(LostClaim, RuntimeError) and Handler is dbworker.Handler
    stamp = now()
    assert stamp.tzinfo is None
    assert abs(stamp - dt.datetime.now(dt.UTC).replace(tzinfo=None)) < dt.timedelta(seconds=5)
