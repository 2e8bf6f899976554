"""Processes that create one new SQLite store at the same moment all get it, none is told
"database is locked" (switching to WAL ignores SQLite's busy timeout, so the store waits).

Without the wait, about one round in ten lost a run here (two batch workers on a new file).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.synchronize import Barrier
from pathlib import Path

import anyio
import pytest
from pydantic import TypeAdapter

from converge import ContextKey, ProposedFact, SqliteRunStore
from converge._scale._batch import BatchFailure, ShardItem, ShardSpec, run_shard

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
CHAIN = str(HERE / "durable_formation.py")
ROUNDS = 60
INPUTS = TypeAdapter(tuple[ProposedFact, ...])


def _worker(path: str, barrier: Barrier, part: int) -> None:
    barrier.wait()
    spec = ShardSpec(CHAIN, path, "race", 32, 30.0)
    for shard in range(4):
        first = (shard * 2 + part) * 4
        items = [
            ShardItem(
                index,
                INPUTS.dump_json(
                    (
                        ProposedFact(
                            key=ContextKey.SEEDS, id="start", content=f"x{index}", provenance="t"
                        ),
                    )
                ).decode(),
            )
            for index in range(first, first + 4)
        ]
        failed = [o for o in run_shard(spec, items) if isinstance(o, BatchFailure)]
        if failed:
            raise SystemExit(f"{failed[0].run_id}: {failed[0].error}")


def test_two_workers_creating_one_store_at_once_lose_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_TEST_STEPS", "3")
    monkeypatch.setenv("CONVERGE_TEST_SLEEP", "0")
    # forkserver: children fork from a clean server process, never from this one, whose
    # threads (thread pools, servers of earlier tests) can hold a lock across a fork
    context = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
    if os.name == "posix":  # the server imports these once; each worker starts with them
        context.set_forkserver_preload(["converge", "converge._scale._batch", "converge.stores"])
    for round_ in range(ROUNDS):
        path = str(tmp_path / f"runs-{round_}.db")
        barrier = context.Barrier(2)
        workers = [context.Process(target=_worker, args=(path, barrier, part)) for part in (0, 1)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [worker.exitcode for worker in workers] == [0, 0], f"round {round_}"
        assert len(anyio.run(SqliteRunStore(path, read_only=True).list_runs)) == 32
