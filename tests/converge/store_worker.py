"""Subprocess helpers for the store tests: concurrent writers, and a crash right after a pause."""

from __future__ import annotations

import os
import signal
import sys

import anyio
from hitl_formation import build_engine

from converge import (
    ContextKey,
    Engine,
    PostgresRunStore,
    ProposedFact,
    RunRecord,
    RunStore,
    SqliteRunStore,
)


def open_store(kind: str, target: str) -> RunStore:
    """A SQLite store at a path, or a PostgreSQL store at a DSN."""
    return SqliteRunStore(target) if kind == "sqlite" else PostgresRunStore(target)


async def write_many(kind: str, target: str, worker: int, count: int) -> None:
    """Run `count` tiny runs and save each under a distinct id."""
    store = open_store(kind, target)
    for index in range(count):
        given = ProposedFact(
            key=ContextKey.SEEDS, id=f"w{worker}-{index}", content="c", provenance="t"
        )
        result = await Engine().run(inputs=[given])
        await store.save(RunRecord.of(result))


async def pause_then_crash(kind: str, target: str) -> None:
    """Run the HITL formation with a store, print the run id, and die at once (SIGKILL)."""
    result = await build_engine(store=open_store(kind, target)).run()
    print(result.run_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    command, kind, target = sys.argv[1:4]
    if command == "write":
        anyio.run(write_many, kind, target, int(sys.argv[4]), int(sys.argv[5]))
    else:
        anyio.run(pause_then_crash, kind, target)
