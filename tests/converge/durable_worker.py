"""A writer process for the durability tests: many short chain runs, saved after every cycle.

`python durable_worker.py KIND TARGET TAG WORKER COUNT` runs `durable_formation.py` (its
length and sleep come from `CONVERGE_TEST_STEPS` and `CONVERGE_TEST_SLEEP`) COUNT times with
`durability="cycle"` into the SQLite file or PostgreSQL DSN TARGET, each run named TAG and
seeded with `chain_seed(TAG, WORKER, index)`, and prints each run's id on a line of its own.

`python durable_worker.py cli READY GO ARGS...` is the `converge` command with a common start:
it imports the command, creates the file READY, waits for the file GO to exist, and only then
runs `converge ARGS...` (its exit status is the command's). A process takes 0.3-0.5 s to start
and that varies by more than the race window, so processes meant to race start this way.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from converge import ContextKey, PostgresRunStore, ProposedFact, RunStore, SqliteRunStore


def chain_seed(tag: str, worker: int, index: int) -> ProposedFact:
    """The seed of run `index` of `worker`: the chain's `seeds/start`, its content unique."""
    return ProposedFact(
        key=ContextKey.SEEDS,
        id="start",
        content=f"{tag} worker {worker} run {index}",
        provenance="test",
    )


def open_store(kind: str, target: str) -> RunStore:
    """A SQLite store at a path, or a PostgreSQL store at a DSN."""
    return SqliteRunStore(target) if kind == "sqlite" else PostgresRunStore(target)


async def write_runs(kind: str, target: str, tag: str, worker: int, count: int) -> None:
    """Run the chain `count` times into the store, printing each run's id."""
    from durable_formation import formation

    store = open_store(kind, target)
    for index in range(count):
        engine = formation.engine(store=store, durability="cycle", name=tag)
        result = await engine.run(inputs=[chain_seed(tag, worker, index)])
        print(result.run_id, flush=True)


def converge_on_go(ready: str, go: str, args: list[str]) -> int:
    """Run `converge ARGS` once the file `go` exists, having created `ready` when loaded."""
    from converge.cli import main

    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.001)
    return main(args)


if __name__ == "__main__":
    if sys.argv[1] == "cli":
        raise SystemExit(converge_on_go(sys.argv[2], sys.argv[3], sys.argv[4:]))
    kind, target, tag, worker, count = sys.argv[1:6]
    anyio.run(write_runs, kind, target, tag, int(worker), int(count))
