"""Fork and diff at scale: `python -m benchmarks.fork` prints one JSON object.

A 100,000-fact run (1,000 facts a cycle for 100 cycles) is recorded, then forked at its
middle cycle (the fork's budget ends it at once, so what is measured is rebuilding the
context: no suggestor runs), and diffed against a second run whose last 50 cycles differ.
Each figure is the median of `--runs` (default 5); memory is `tracemalloc`'s peak during
the operation against what its result keeps, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import tracemalloc
from statistics import median
from time import perf_counter

import anyio

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    Engine,
    ProposedFact,
    RunRecord,
)
from converge._diff import diff_runs
from converge._kernel._fork import fork_point

CYCLES = 100
PER_CYCLE = 1_000


class Bulk:
    """`PER_CYCLE` facts a cycle for `CYCLES` cycles; `variant` changes the later half."""

    name = "bulk"
    dependencies = ()

    def __init__(self, variant: str = "") -> None:
        self._variant = variant

    def accepts(self, ctx: Context, /) -> bool:
        """Until the run has all its facts."""
        return ctx.count(ContextKey.HYPOTHESES) < CYCLES * PER_CYCLE

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """The next cycle's facts."""
        cycle = ctx.count(ContextKey.HYPOTHESES) // PER_CYCLE + 1
        tag = self._variant if cycle > CYCLES // 2 else ""
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"h-{cycle}-{i}",
                    content=f"fact {i} of cycle {cycle}{tag}",
                    provenance=self.name,
                )
                for i in range(PER_CYCLE)
            ]
        )


def _engine(variant: str = "", max_cycles: int = CYCLES + 5) -> Engine:
    engine = Engine(budget=Budget(max_cycles=max_cycles, max_facts=10 * CYCLES * PER_CYCLE))
    engine.register_suggestor(Bulk(variant))
    return engine


async def _record(variant: str) -> RunRecord:
    result = await _engine(variant).run()
    return RunRecord.of(result)


async def _measure(runs: int) -> dict[str, float | int]:
    parent = await _record("")
    other = await _record(" (changed)")
    middle = CYCLES // 2
    kept = len(fork_point(parent, middle).facts)
    fork_engine = _engine(max_cycles=middle)
    fork_s: list[float] = []
    diff_s: list[float] = []
    for _ in range(runs):  # timed without tracemalloc, which slows allocation
        gc.collect()
        start = perf_counter()
        fork = await fork_engine.fork(parent, at_cycle=middle)
        fork_s.append(perf_counter() - start)
        assert len(fork.context) == kept
        del fork
        gc.collect()
        start = perf_counter()
        diff = diff_runs(parent, other, limit=20)
        diff_s.append(perf_counter() - start)
        assert diff.first_difference == middle + 1
    gc.collect()
    tracemalloc.start()
    fork = await fork_engine.fork(parent, at_cycle=middle)
    fork_kept, fork_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del fork
    gc.collect()
    tracemalloc.start()
    diff_runs(parent, other, limit=20)
    diff_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "facts": len(parent.facts),
        "kept_at_fork": kept,
        "fork_s": round(median(fork_s), 3),
        "fork_peak_mb": round(fork_peak / 2**20, 1),
        "fork_kept_mb": round(fork_kept / 2**20, 1),
        "fork_peak_over_kept": round(fork_peak / max(fork_kept, 1), 2),
        "diff_s": round(median(diff_s), 3),
        "diff_peak_mb": round(diff_peak / 2**20, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fork")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    args = parser.parse_args(argv)
    figures = anyio.run(_measure, args.runs)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
