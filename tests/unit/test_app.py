"""Unit tests of dbworker.pod.app: loading MODULE:ATTR, worker selection, overrides, item IDs."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import redact
from dbworker.pod import app, options, termination


def parse(*argv: str, **env: str) -> options.Options:
    return options.parse(list(argv), env)


class FakeCoordinator:
    def __init__(self, *names: str) -> None:
        self.workers = {n: SimpleNamespace(concurrency=1) for n in names}
        self.lease_seconds, self.poll_seconds, self.max_poll_seconds = 30.0, 0.25, 10.0
        self.configured: dict[str, float] = {}

    def set_concurrency(self, name: str, n: int) -> None:
        self.workers[name].concurrency = n

    def configure(self, **kw: float) -> None:
        if kw.get("lease_seconds", 1) > 1000:
            raise ValueError("lease_seconds must be at most 1000")
        self.configured.update(kw)


def test_select_workers() -> None:
    c: Any = FakeCoordinator("hash", "compare")
    assert app.select_workers(c, parse("run", "a:c")) == ["hash", "compare"]
    assert app.select_workers(c, parse("run", "a:c", "--worker", "compare")) == ["compare"]
    with pytest.raises(termination.CommandError) as info:
        app.select_workers(c, parse("run", "a:c", DBWORKER_WORKER="hash,x"))
    assert str(info.value) == "unknown worker 'x' (DBWORKER_WORKER); known workers: hash, compare"
    assert info.value.code == termination.EXIT_USAGE
    assert info.value.reason == termination.UNKNOWN_WORKER
    with pytest.raises(termination.CommandError, match="registers no workers") as none:
        app.select_workers(FakeCoordinator(), parse("run", "a:c"))  # type: ignore[arg-type]
    assert none.value.reason == termination.BAD_INPUT


def test_apply_overrides() -> None:
    c: Any = FakeCoordinator("hash", "compare")
    slots = app.apply_overrides(
        c, parse("run", "a:c", "--concurrency", "hash=4", "--lease-seconds", "9")
    )
    assert slots == {"hash": 4, "compare": 1}
    assert c.configured == {"lease_seconds": 9}
    with pytest.raises(
        termination.CommandError,
        match=r"unknown worker 'nope' in --concurrency; known workers: hash, compare",
    ) as unknown:
        app.apply_overrides(c, parse("run", "a:c", "--concurrency", "nope=2"))
    assert unknown.value.reason == termination.UNKNOWN_WORKER
    # Checked against what the code set: max_poll 10 from the code, poll 20 from the flag.
    with pytest.raises(termination.CommandError, match=r"^the application's max_poll_seconds \(10\) must be >= --poll-seconds \(20\)") as order:
        app.apply_overrides(c, parse("run", "a:c", "--poll-seconds", "20"))
    assert order.value.reason == termination.BAD_INPUT
    with pytest.raises(
        termination.CommandError, match="--lease-seconds: lease_seconds must be at most 1000"
    ):
        app.apply_overrides(c, parse("run", "a:c", "--lease-seconds", "5000"))


class Base(DeclarativeBase):
    pass


class IntRow(Base):
    __tablename__ = "int_row"
    id: Mapped[int] = mapped_column(primary_key=True)


class UuidRow(Base):
    __tablename__ = "uuid_row"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)


class TextRow(Base):
    __tablename__ = "text_row"
    id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)


def test_convert_id_follows_the_primary_key_type() -> None:
    assert app.convert_id("42", IntRow) == 42
    u = uuid.uuid4()
    assert app.convert_id(str(u), UuidRow) == u
    assert app.convert_id("k-1", TextRow) == "k-1"
    with pytest.raises(termination.CommandError, match="item ID 'x' is not an integer"):
        app.convert_id("x", IntRow)
    with pytest.raises(termination.CommandError, match="item ID 'x' is not a UUID"):
        app.convert_id("x", UuidRow)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tests", "malformed MODULE:ATTR 'tests'"),
        ("tests:", "malformed MODULE:ATTR"),
        ("no_such_module_dbw:c", "cannot import module 'no_such_module_dbw'"),
        ("json:no_such_attr", "module 'json' has no attribute 'no_such_attr'"),
        ("json:dumps", "'json:dumps' is a function, not a dbworker.Coordinator"),
    ],
)
def test_load_app_errors(spec: str, expected: str) -> None:
    with pytest.raises(termination.CommandError) as info:
        app.load_app(spec)
    assert expected in str(info.value) and info.value.code == termination.EXIT_USAGE
    assert info.value.reason == termination.BAD_INPUT


def test_load_app_reports_import_time_failures_without_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "brokenapp_dbw.py").write_text(
        "raise RuntimeError('cannot connect to postgresql://app:s3cret@db/app')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(termination.CommandError) as info:
        app.load_app("brokenapp_dbw:coordinator")
    message = str(info.value)
    assert "importing 'brokenapp_dbw' failed: RuntimeError" in message
    # The message is redacted where it is printed.
    assert "s3cret" not in redact.redact(message)
