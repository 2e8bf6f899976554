"""W9, isolation: `python -m benchmarks.isolation` prints one JSON object.

- Overhead: a trivial suggestor that adds one fact a cycle for `--cycles` cycles (default
  200), run in process and isolated (`converge.isolated`); the overhead is the median call
  duration of the isolated run's trace minus the in-process one's, in µs. Measured on an
  empty starting context and on one of 10,000 facts: the worker is sent the whole context
  at its first call and only what changed afterwards, so the steady overhead must not grow.
- Parallelism: eight CPU-bound suggestors of 50 ms each in one cycle, in process (one core,
  one after another) and isolated in a pool of `--workers` (default: the core count); the
  figure is the in-process cycle's wall time over the isolated one's.

Each figure is the median of `--runs` (default 5) interleaved pairs (in process, isolated);
the pool is started before timing (its start-up is reported apart). The machine's load
average is reported before and after (`load_1m_before`, `load_1m_after`): an isolated call
polls for its reply a moment only while a core is free, so its overhead depends on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from statistics import median
from time import perf_counter

import anyio

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    ContextSnapshot,
    Engine,
    ProposedFact,
    Suggestor,
    WorkerPool,
)

CONTEXT_FACTS = 10_000
SPIN_SECONDS = 0.05
SPINNERS = 8


class Tick:
    """One fact a cycle under `HYPOTHESES`, until `cycles` of them."""

    name = "tick"
    dependencies = (ContextKey.HYPOTHESES, ContextKey.SEEDS)

    def __init__(self, cycles: int) -> None:
        self.cycles = cycles

    def accepts(self, ctx: Context, /) -> bool:
        """Until `cycles` ticks."""
        return ctx.count(ContextKey.HYPOTHESES) < self.cycles

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """The next tick."""
        n = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id=f"t{n}", content=str(n), provenance="tick")
        )


class Spin:
    """Holds a core for `seconds` of pure Python once, then proposes one fact."""

    dependencies = (ContextKey.SEEDS,)

    def __init__(self, name: str, seconds: float = SPIN_SECONDS) -> None:
        self.name = name
        self.seconds = seconds

    def accepts(self, ctx: Context, /) -> bool:
        """Once."""
        return ctx.find(ContextKey.HYPOTHESES, self.name) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Spin, then propose."""
        end = time.process_time() + self.seconds
        while time.process_time() < end:
            pass
        return AgentEffect.with_proposal(
            ProposedFact(
                key=ContextKey.HYPOTHESES, id=self.name, content="spun", provenance=self.name
            )
        )


async def _big_context() -> ContextSnapshot:
    engine = Engine(budget=Budget(max_facts=CONTEXT_FACTS * 2))
    inputs = [
        ProposedFact(key=ContextKey.SEEDS, id=f"s{i}", content=f"seed {i}", provenance="bench")
        for i in range(CONTEXT_FACTS)
    ]
    return (await engine.run(inputs=inputs)).context


def _seed() -> list[ProposedFact]:
    return [ProposedFact(key=ContextKey.SEEDS, id="go", content="go", provenance="bench")]


async def _call_us(suggestor: Suggestor, context: ContextSnapshot | None) -> float:
    """The median duration of the run's calls, in µs (the first call left out)."""
    engine = Engine(budget=Budget(max_cycles=10_000, max_facts=CONTEXT_FACTS * 2))
    engine.register_suggestor(suggestor)
    if context is None:
        result = await engine.run(inputs=_seed())
    else:
        result = await engine.run(context=context, inputs=_seed())
    durations = [e.duration_ms for c in result.trace.cycles for e in c.executions]
    assert len(durations) > 1, result.stop_reason
    return median(durations[1:]) * 1000.0


async def _cycle_s(suggestors: list[Suggestor]) -> float:
    engine = Engine()
    for suggestor in suggestors:
        engine.register_suggestor(suggestor)
    started = perf_counter()
    result = await engine.run(inputs=_seed())
    elapsed = perf_counter() - started
    assert result.failures == (), result.failures
    assert result.context.count(ContextKey.HYPOTHESES) == len(suggestors)
    return elapsed


def _load() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # no load average here
        return -1.0


async def _measure(runs: int, cycles: int, workers: int) -> dict[str, float | int]:
    load_before = _load()
    started = perf_counter()
    pool = WorkerPool(workers)
    tick = pool.isolated("benchmarks.isolation:Tick", cycles=cycles)
    spinners = [
        pool.isolated("benchmarks.isolation:Spin", name=f"spin-{i}") for i in range(SPINNERS)
    ]
    start_s = perf_counter() - started
    big = await _big_context()
    figures: dict[str, list[float]] = {}
    try:
        for _ in range(runs):
            for label, context in (("empty", None), ("10k", big)):
                local = await _call_us(Tick(cycles), context)
                remote = await _call_us(tick, context)
                figures.setdefault(f"in_process_call_us_{label}", []).append(local)
                figures.setdefault(f"isolated_call_us_{label}", []).append(remote)
                figures.setdefault(f"overhead_us_{label}", []).append(remote - local)
            local_s = await _cycle_s([Spin(f"spin-{i}") for i in range(SPINNERS)])
            remote_s = await _cycle_s(list(spinners))
            figures.setdefault("cpu_in_process_s", []).append(local_s)
            figures.setdefault("cpu_isolated_s", []).append(remote_s)
            figures.setdefault("cpu_speedup", []).append(local_s / remote_s)
    finally:
        pool.close()
    out: dict[str, float | int] = {
        "workers": workers,
        "cycles": cycles,
        "runs": runs,
        "pool_start_s": round(start_s, 3),
        "load_1m_before": load_before,
        "load_1m_after": _load(),
    }
    for name, values in figures.items():
        out[name] = round(median(values), 3 if name.endswith(("_s", "speedup")) else 1)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.isolation")
    parser.add_argument("--runs", type=int, default=5, help="interleaved pairs (default 5)")
    parser.add_argument("--cycles", type=int, default=200, help="calls per run (default 200)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    figures = anyio.run(_measure, args.runs, args.cycles, args.workers)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
