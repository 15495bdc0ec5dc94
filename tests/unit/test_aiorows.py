"""Claimed rows of an async handler process read together (aiorows.RowLoader), on SQLite
through aiosqlite: the items of one turn of the loop share one SELECT; a key not returned,
or asked for twice at once, is answered AGAIN (read alone by its item)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dbworker import aiorows

pytest.importorskip("aiosqlite")


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "rows"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str]


async def _with_loader(path: Path, body: Any) -> tuple[Any, list[str]]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    selects: list[str] = []
    sa.event.listen(engine.sync_engine, "before_cursor_execute",
                    lambda _c, _cur, statement, *_: selects.append(statement) if "SELECT" in statement else None)  # fmt: skip
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
        await conn.execute(sa.insert(Row), [{"id": i, "name": f"row {i}"} for i in range(1, 6)])
    selects.clear()
    try:
        return await body(aiorows.RowLoader(engine, Row, autocommit=False)), selects
    finally:
        await engine.dispose()


def test_rows_asked_for_in_one_turn_are_read_by_one_select(tmp_path: Path) -> None:
    async def body(loader: aiorows.RowLoader) -> list[Any]:
        return list(await asyncio.gather(*(loader.get(k) for k in (3, 1, 5))))

    rows, selects = asyncio.run(_with_loader(tmp_path / "a.db", body))
    assert [(r.id, r.name) for r in rows] == [(3, "row 3"), (1, "row 1"), (5, "row 5")]
    assert all(sa.inspect(r).detached for r in rows)  # for each item's own session to take
    assert len(selects) == 1


def test_a_missing_or_repeated_key_is_answered_again(tmp_path: Path) -> None:
    async def body(loader: aiorows.RowLoader) -> list[Any]:
        return list(await asyncio.gather(loader.get(2), loader.get(2), loader.get(99)))

    (first, second, missing), _ = asyncio.run(_with_loader(tmp_path / "b.db", body))
    assert first.id == 2 and second is aiorows.AGAIN and missing is aiorows.AGAIN


def test_a_failed_read_fails_every_item_that_waited_for_it(tmp_path: Path) -> None:
    async def body(loader: aiorows.RowLoader) -> list[Any]:
        async with loader._engine.begin() as conn:  # the read must fail
            await conn.execute(sa.text("DROP TABLE rows"))
        return list(await asyncio.gather(loader.get(1), loader.get(2), return_exceptions=True))

    results, _ = asyncio.run(_with_loader(tmp_path / "c.db", body))
    assert all(isinstance(r, sa.exc.OperationalError) for r in results)
