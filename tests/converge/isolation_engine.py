"""An engine process for the isolation tests: it starts workers, prints their pids and waits.

`python isolation_engine.py main` starts the pool from the main thread and waits idle;
`python isolation_engine.py thread` starts it from another thread and waits in the middle of
a call to a suggestor that hangs. The test kills this process with SIGKILL and watches the
workers go.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import anyio

from converge import Engine, WorkerPool
from converge_suggestors import SeedSuggestor


def _start(where: str, pids: list[int]) -> None:
    pool = WorkerPool(2)
    hang = pool.isolated("isolated_suggestors:Misbehaver", how="hang", seconds=600.0)
    pids.extend(pool.pids)
    if where == "thread":
        engine = Engine()
        engine.register_suggestor(SeedSuggestor("a", "alpha"))
        engine.register_suggestor(hang)
        threading.Thread(target=_report, args=(pids,), daemon=True).start()
        anyio.run(engine.run)
    else:
        _report(pids)


def _report(pids: list[int]) -> None:
    time.sleep(0.5)  # the hanging call has started by now
    print(json.dumps(sorted(pids)), flush=True)


def main(where: str) -> None:
    """Start the pool `where` says, print the worker pids, then wait to be killed."""
    pids: list[int] = []
    if where == "thread":
        threading.Thread(target=_start, args=(where, pids), daemon=True).start()
    else:
        _start(where, pids)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
