r"""Run W1, W3 or W4 a fixed number of times, untimed: a workload for an instruction counter.

Time on a shared machine moves with its load; the number of instructions a run executes
does not (for the same interpreter, inputs and hash seed). To compare two commits:

    count() {  # instructions of: one warm-up run, then $2 runs of workload $1
        PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            python -m benchmarks.instructions "$1" "$2" 2>&1 | grep -oP 'Collected : \K\d+'
    }
    echo $(( ($(count W4 5) - $(count W4 0)) / 5 ))   # instructions per W4 run

in each tree (`PYTHONPATH` pointing at it). The difference of the two counts removes the
start-up (imports, the warm-up run). Counting is about 50 times slower than running; it
weighs every instruction alike, so it is a check on the direction and size of a change,
not a replacement for the timed suite. The workloads are the suite's own: W1's chain of 200,
W3's growth to 10,000 facts (a new engine per run), W4 with 1,000 registered suggestors.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from converge import Budget, ConvergeResult, Engine

from . import chain, growth, wide_idle

__all__ = ["main", "workload"]

WORKLOADS: Final = ("W1", "W3", "W4")


def workload(name: str) -> Callable[[], Awaitable[ConvergeResult]]:
    """One run of workload `name` (checked by the caller), on an engine built once."""
    if name == "W1":
        w1, _ = chain.build_engine()
        return lambda: w1.run(inputs=[chain.START])
    if name == "W4":
        w4 = wide_idle.build_engine(1000)
        return lambda: w4.run(inputs=[wide_idle.START])

    async def w3() -> ConvergeResult:
        engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))
        engine.register_suggestor(growth.Grower())
        return await engine.run()

    return w3


_CHECKS: Final = {"W1": chain.check, "W3": growth.check, "W4": wide_idle.check}


async def _runs(name: str, runs: int) -> None:
    run = workload(name)
    check = _CHECKS[name]
    for _ in range(runs + 1):  # the first is the warm-up
        check(await run())


def main(argv: list[str] | None = None) -> None:
    """`python -m benchmarks.instructions W4 5`: a warm-up run, then five."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("runs", type=int, help="runs after the warm-up run")
    arguments = parser.parse_args(argv)
    gc.collect()
    anyio.run(_runs, arguments.workload, arguments.runs, backend="asyncio")


if __name__ == "__main__":
    main()
