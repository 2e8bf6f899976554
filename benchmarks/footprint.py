r"""The memory one run touches: pages referenced after a full collection (Linux only).

On this machine a run that follows `gc.collect()` pays about half a microsecond for each
page of memory it touches first (the collection walks the whole heap, and the run finds its
own code and data out of the caches and the TLB). That is the cold start the suite's
`cold_start_us_per_run` reports, so the number of pages a run touches is what to cut to
shorten it. The kernel counts them: writing `1` to `/proc/self/clear_refs` clears the
"referenced" bit of every page of the process, and `/proc/self/smaps` then reports, per
mapping, how much has been referenced since.

    python -m benchmarks.footprint one      # a run of one quiet cycle (the fixed part)
    python -m benchmarks.footprint W1 W4    # the suite's W1 and W4 (1,000 registered)

It prints one JSON object: per workload, the KiB referenced by one run (the median of
`--runs`, each after `gc.collect()`, with what measuring alone references subtracted), by
area: `python_heap` (pymalloc's arenas and other anonymous mappings), `malloc_heap` (the C
heap: larger objects, big dict tables) and `code` (libpython's and the extension modules'
pages: the C code the run goes through), and their total in KiB and in 4 KiB pages.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

import anyio

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    ProposedFact,
    StopReason,
)

from . import chain, wide_idle
from .instructions import workload

__all__ = ["WORKLOADS", "available", "footprint", "main"]

WORKLOADS: Final = ("one", "W1", "W4")
_CLEAR: Final = Path("/proc/self/clear_refs")
_SMAPS: Final = Path("/proc/self/smaps")
_AREAS: Final = ("python_heap", "malloc_heap", "code")


class _Never:
    """Depends on `SEEDS` and never accepts: the run is its inputs and one quiet cycle."""

    name = "never"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return False

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


def _one() -> Callable[[], Awaitable[ConvergeResult]]:
    engine = Engine(budget=Budget(max_cycles=10))
    engine.register_suggestor(_Never())
    start = ProposedFact(key=ContextKey.SEEDS, id="start", content="start", provenance="bench")
    return lambda: engine.run(inputs=[start])


def _one_check(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or result.cycles != 1:
        raise RuntimeError(f"the one-cycle run did not run as designed: {result!r}")
    return result.cycles


_CHECKS: Final = {"one": _one_check, "W1": chain.check, "W4": wide_idle.check}


def available() -> bool:
    """Whether this system can count referenced pages (Linux, with `clear_refs`)."""
    try:
        _CLEAR.write_text("1")
    except OSError:
        return False
    return _SMAPS.exists()


def _referenced() -> dict[str, int]:
    """KiB referenced since the last clearing, per area."""
    areas: dict[str, int] = dict.fromkeys(_AREAS, 0)
    area = "python_heap"
    with _SMAPS.open() as smaps:
        for line in smaps:
            head = line.split(maxsplit=6)
            if "-" in head[0] and ":" not in head[0]:  # a mapping's first line
                name = head[5].strip() if len(head) > 5 else ""
                area = "malloc_heap" if name == "[heap]" else "code" if name else "python_heap"
                if name.startswith("[") and name != "[heap]":
                    area = "python_heap"  # the stack, vdso and the like
            elif head[0] == "Referenced:":
                areas[area] += int(head[1])
    return areas


async def footprint(
    run: Callable[[], Awaitable[ConvergeResult]],
    check: Callable[[ConvergeResult], int],
    runs: int,
) -> dict[str, float]:
    """KiB one run references after a full collection, per area (medians over `runs`).

    Each run's result is checked.
    """
    for _ in range(3):
        check(await run())  # warm: imports, caches, the engine's kept stamps
    idle: list[dict[str, int]] = []
    used: list[dict[str, int]] = []
    for _ in range(runs):
        gc.collect()
        _CLEAR.write_text("1")
        idle.append(_referenced())
        gc.collect()
        _CLEAR.write_text("1")
        result = await run()
        used.append(_referenced())
        check(result)
    figures = {
        area: statistics.median(u[area] for u in used) - statistics.median(i[area] for i in idle)
        for area in _AREAS
    }
    total = sum(figures.values())
    return {**figures, "total_kib": total, "pages": total / 4}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks.footprint one W1`: print the footprint of each as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.footprint")
    parser.add_argument("workloads", nargs="+", choices=WORKLOADS)
    parser.add_argument("--runs", type=int, default=9, help="runs per workload (default 9)")
    arguments = parser.parse_args(argv)
    if arguments.runs < 1:
        parser.error("--runs must be at least 1")
    if not available():
        print("footprint needs Linux's /proc/self/clear_refs and smaps", file=sys.stderr)
        return 2
    report: dict[str, dict[str, float]] = {}
    for name in arguments.workloads:
        run = _one() if name == "one" else workload(name)
        report[name] = anyio.run(footprint, run, _CHECKS[name], arguments.runs, backend="asyncio")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
