"""`GroupedSaves`: concurrent saves of one process committed together, each keeping its word.

- 60 concurrent runs saved every cycle through it: every run stored as the same run saved
  alone would be (Merkle root, cycles, status), in far fewer transactions than saves;
- a save whose run is at another version raises `StaleRecordError` alone: the others of its
  transaction commit;
- a save that breaks its transaction fails alone: the others are written each on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from test_store import postgres_or_skip

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    PostgresRunStore,
    ProposedFact,
    RunRecord,
    RunStatus,
    SqliteRunStore,
    StaleRecordError,
)
from converge._scale._grouped import GroupedSaves, grouped
from converge.stores._db import Db

H = ContextKey.HYPOTHESES


class Steps:
    """Three hypotheses, one a cycle, each after a short wait (concurrent runs interleave)."""

    name = "steps"
    dependencies = (ContextKey.SEEDS, H)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) < 3

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(0.01)
        n = ctx.count(H)
        return AgentEffect.with_proposals(
            [ProposedFact(key=H, id=f"h{n}", content=f"step {n}", provenance="steps")]
        )


def seed(index: int) -> ProposedFact:
    return ProposedFact(key=ContextKey.SEEDS, id="s", content=f"case {index}", provenance="t")


@pytest.fixture
def anyio_backend() -> str:
    """The stores' threads, not the event loop, are under test: asyncio only."""
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def inner(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[SqliteRunStore | PostgresRunStore]:
    store = (
        SqliteRunStore(tmp_path / "runs.db")
        if request.param == "sqlite"
        else PostgresRunStore(postgres_or_skip())
    )
    yield store
    store.close()


def count_transactions(store: GroupedSaves) -> list[int]:
    """Counts the transactions `store` opens (one entry per transaction)."""
    writer = store._writer  # pyright: ignore[reportPrivateUsage]
    opened: list[int] = []
    original = writer._transaction  # pyright: ignore[reportPrivateUsage]

    async def counting(work: Callable[[Db], object], **options: bool) -> object:
        if not options:  # a write of the grouped saves (reads pass write= or read=)
            opened.append(1)
        return await original(work, **options)

    writer._transaction = counting  # pyright: ignore[reportPrivateUsage]
    return opened


@pytest.mark.anyio
async def test_grouped_saves_store_each_run_as_alone_in_fewer_transactions(
    inner: SqliteRunStore | PostgresRunStore,
) -> None:
    store = grouped(inner)
    assert isinstance(store, GroupedSaves)
    opened = count_transactions(store)
    engine = Engine(store=store)
    engine.register_suggestor(Steps())
    reference = Engine()
    reference.register_suggestor(Steps())
    results: list[ConvergeResult] = []

    async def one(index: int) -> None:
        results.append(await engine.run(inputs=[seed(index)]))

    async with anyio.create_task_group() as group:
        for index in range(60):
            group.start_soon(one, index)

    saves = 0
    for result in results:
        record = await inner.load(result.run_id)
        alone = await reference.run(inputs=list(result.trace.inputs))
        assert record.status is RunStatus.FINISHED
        assert record.integrity.merkle_root == alone.integrity.merkle_root
        assert record.cycles == alone.cycles == 4
        saves += record.cycles + 1  # a save before each cycle, and the finished record
    assert len(opened) < saves / 4, (len(opened), saves)


@pytest.mark.anyio
async def test_grouped_saves_fail_a_stale_save_alone(
    inner: SqliteRunStore | PostgresRunStore,
) -> None:
    engine = Engine(store=inner)
    engine.register_suggestor(Steps())
    done = await engine.run(inputs=[seed(1)])
    stored = await inner.load(done.run_id)
    store = GroupedSaves(inner)
    fresh = await Engine().run(inputs=[seed(2)])

    outcomes: dict[str, object] = {}

    async def save(name: str, record: RunRecord, expected: int) -> None:
        try:
            outcomes[name] = await store.save(record, expected_version=expected)
        except StaleRecordError as error:
            outcomes[name] = error

    async with anyio.create_task_group() as group:
        group.start_soon(save, "first", RunRecord.of(fresh), 0)  # writes alone, holding others
        group.start_soon(save, "stale", stored, stored.version + 5)
        group.start_soon(save, "new", RunRecord.of(await Engine().run(inputs=[seed(3)])), 0)
    assert outcomes["first"] == 1
    assert outcomes["new"] == 1
    assert isinstance(outcomes["stale"], StaleRecordError)
    assert (await inner.load(done.run_id)).version == stored.version  # untouched


@pytest.mark.anyio
async def test_grouped_saves_fail_a_broken_save_alone(
    inner: SqliteRunStore | PostgresRunStore,
) -> None:
    store = GroupedSaves(inner)
    records = [RunRecord.of(await Engine().run(inputs=[seed(index)])) for index in range(3)]
    outcomes: dict[int, object] = {}

    def broken(db: Db) -> int:
        raise RuntimeError("this save breaks its transaction")

    async def save(index: int) -> None:
        try:
            outcomes[index] = await store.save(records[index], expected_version=0)
        except StaleRecordError as error:
            outcomes[index] = error

    async def breaks() -> None:
        try:
            await store._write(broken)  # pyright: ignore[reportPrivateUsage]
        except RuntimeError as error:
            outcomes[-1] = error

    async with anyio.create_task_group() as group:
        group.start_soon(save, 0)
        group.start_soon(breaks)
        group.start_soon(save, 1)
        group.start_soon(save, 2)
    assert isinstance(outcomes[-1], RuntimeError)
    assert [outcomes[index] for index in range(3)] == [1, 1, 1]
    for record in records:
        assert (await inner.load(record.run_id)).status is RunStatus.FINISHED


def test_grouped_leaves_a_read_only_or_foreign_store_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    read_only = SqliteRunStore(path, read_only=True)
    assert grouped(read_only) is read_only
