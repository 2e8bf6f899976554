"""A short read of a SQLite store runs with no event loop (`stores._by_hand.drive`).

`converge runs`, `show` and `review` on a SQLite store import neither asyncio nor anyio's
backend; anything a driven coroutine awaits that needs an event loop fails loudly, never
hangs or reads as success; outside `drive` a store works in worker threads as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Generator
from pathlib import Path

import anyio
import pytest

from converge import (
    ContextKey,
    Engine,
    ProposedFact,
    RunNotFoundError,
    RunRecord,
    RunSummary,
    SqliteRunStore,
)
from converge.stores._by_hand import drive, on_caller
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "cli_formation.py")


def saved_run(path: Path) -> str:
    store = SqliteRunStore(path)
    fact = ProposedFact(key=ContextKey.SEEDS, id="a", content="A.", provenance="test")
    result = Engine().run_sync(inputs=[fact])
    anyio.run(store.save, RunRecord.of(result))
    store.close()
    return result.run_id


def test_a_driven_read_of_a_sqlite_store_needs_no_event_loop(tmp_path: Path) -> None:
    run_id = saved_run(tmp_path / "runs.db")
    store = SqliteRunStore(tmp_path / "runs.db", read_only=True)
    seen: list[bool] = []

    async def read() -> tuple[tuple[RunSummary, ...], RunRecord]:
        seen.append(on_caller())
        return await store.list_runs(), await store.load(run_id)

    listed, record = drive(read)
    assert [summary.run_id for summary in listed] == [run_id]
    assert record.run_id == run_id
    assert seen == [True]
    assert not on_caller()
    store.close()


def test_outside_drive_a_store_still_runs_its_queries_in_worker_threads(tmp_path: Path) -> None:
    run_id = saved_run(tmp_path / "runs.db")
    store = SqliteRunStore(tmp_path / "runs.db", read_only=True)

    async def read() -> tuple[bool, tuple[RunSummary, ...]]:
        return on_caller(), await store.list_runs()

    inside, listed = anyio.run(read)
    assert not inside
    assert [summary.run_id for summary in listed] == [run_id]
    store.close()


def test_an_error_of_a_driven_read_is_raised_and_the_caller_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    saved_run(tmp_path / "runs.db")
    store = SqliteRunStore(tmp_path / "runs.db", read_only=True)
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        drive(lambda: store.load("nope"))
    assert not on_caller()
    store.close()


def test_what_needs_an_event_loop_fails_loudly_when_driven(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")

    async def sleeps() -> int:
        await anyio.sleep(0.01)
        return 1

    with pytest.raises(anyio.NoEventLoopError):
        drive(sleeps)
    with pytest.raises(anyio.NoEventLoopError):  # the side file is read in a worker thread
        drive(lambda: store.live_text("run"))
    assert not on_caller()


@types.coroutine
def _wait() -> Generator[None]:
    yield  # what waiting on an event loop looks like to whoever drives the coroutine


def test_a_driven_coroutine_that_waits_anyway_is_an_error_and_is_closed() -> None:
    ended: list[str] = []

    async def waits() -> int:
        try:
            await _wait()
            return 1
        finally:
            ended.append("closed")

    with pytest.raises(RuntimeError, match="waited for one"):
        drive(waits)
    assert ended == ["closed"]
    assert not on_caller()


def test_read_commands_on_sqlite_start_no_event_loop(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 6, out  # paused on its gate: `review` and the inbox exit 6
    run_id = run_id_of(out)
    program = f"""
import io, json, sys
from converge.cli import main

codes = [
    main(arguments, out=io.StringIO())
    for arguments in (
        ["runs", "--store", {store!r}],
        ["show", {run_id!r}, "--store", {store!r}],
        ["review", {run_id!r}, "--store", {store!r}],
        ["review", "--store", {store!r}],
    )
]
loops = sorted(name for name in sys.modules if name.startswith(("asyncio", "anyio._backends")))
print(json.dumps({{"codes": codes, "loops": loops}}))
"""
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == {"codes": [0, 0, 6, 6], "loops": []}
