"""W4 wide-idle: 1, 100 and 1,000 registered suggestors, exactly one eligible per cycle.

The one active suggestor, the ticker, depends on `SIGNALS` and proposes one new `SIGNALS`
fact per cycle until 101 exist (the input that starts the run plus 100 ticks). The idle
ones depend on `COMPETITORS`, a key that never gains a fact, so they are never candidates.
Per-cycle cost should not depend on how many sit idle: the ratio of 1,000 to 1 should be 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from time import perf_counter
from typing import Final, final

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

from ._common import (
    Figures,
    Settings,
    median,
    prepare,
    progress,
    quartiles,
    rounded,
    traced_memory,
    warm_run,
)

__all__ = ["START", "Idle", "Ticker", "build_engine", "check", "measure"]

SIZES: Final = (1, 100, 1000)
TICKS: Final = 100
START: Final = ProposedFact(
    key=ContextKey.SIGNALS, id="tick-0", content="tick 0", provenance="input:bench"
)


@final
class Ticker:
    """Proposes `tick-{n}` under `SIGNALS` while at most 100 signals exist."""

    __slots__ = ("_effects",)

    def __init__(self) -> None:
        self._effects = [
            AgentEffect.with_proposal(
                ProposedFact(
                    key=ContextKey.SIGNALS, id=f"tick-{n}", content=f"tick {n}", provenance="ticker"
                )
            )
            for n in range(TICKS + 1)
        ]

    @property
    def name(self) -> str:
        """`ticker`."""
        return "ticker"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`SIGNALS`."""
        return (ContextKey.SIGNALS,)

    def accepts(self, ctx: Context, /) -> bool:
        """True while at most 100 signals exist."""
        return ctx.count(ContextKey.SIGNALS) <= TICKS

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the next tick (built up front)."""
        return self._effects[ctx.count(ContextKey.SIGNALS)]


@final
class Idle:
    """Depends on `COMPETITORS`, which never changes, so it is never a candidate."""

    __slots__ = ("_name",)

    def __init__(self, index: int) -> None:
        self._name = f"idle-{index}"

    @property
    def name(self) -> str:
        """`idle-{index}`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`COMPETITORS`."""
        return (ContextKey.COMPETITORS,)

    def accepts(self, ctx: Context, /) -> bool:
        """Never true (and never asked)."""
        return False

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Nothing."""
        return AgentEffect.empty()


def build_engine(size: int) -> Engine:
    engine = Engine(budget=Budget(max_cycles=1000))
    for index in range(size - 1):
        engine.register_suggestor(Idle(index))
    engine.register_suggestor(Ticker())
    return engine


def check(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != TICKS + 1:
        raise RuntimeError(f"W4 did not run as designed: {result!r}")
    return result.cycles


async def _measure(settings: Settings) -> Figures:
    engines = {size: build_engine(size) for size in SIZES}
    cycles = 0
    for _ in range(settings.warmups):
        for engine in engines.values():
            cycles = check(await engine.run(inputs=[START]))
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    warm: dict[int, list[float]] = {size: [] for size in SIZES}
    for _ in range(settings.runs):  # sizes interleaved, so drift in the machine hits all alike
        for size, engine in engines.items():
            prepare()
            started = perf_counter()
            result = await engine.run(inputs=[START])
            times[size].append(perf_counter() - started)
            cycles = check(result)
            del result
            warm[size].append(await warm_run(partial(engine.run, inputs=[START]), check))
    lone = engines[SIZES[0]]
    memory = await traced_memory(lambda: lone.run(inputs=[START]), check)
    per_cycle = {size: median(runs) * 1e6 / cycles for size, runs in times.items()}
    smallest, largest = times[SIZES[0]], times[SIZES[-1]]
    ratios = [wide / narrow for wide, narrow in zip(largest, smallest, strict=True)]
    return {
        "cycles": cycles,
        "eligible_per_cycle": 1,
        "runs": settings.runs,
        "us_per_cycle": {str(size): rounded(value) for size, value in per_cycle.items()},
        "us_per_cycle_quartiles": {
            str(size): quartiles(runs, 1e6 / cycles) for size, runs in times.items()
        },
        "warm_us_per_cycle": {
            str(size): rounded(median(runs) * 1e6 / cycles) for size, runs in warm.items()
        },
        "cold_start_us_per_run": {
            str(size): rounded(_cold(times[size], runs) * 1e6) for size, runs in warm.items()
        },
        "ratio_1000_to_1": rounded(median(ratios), 3),
        "ratio": "median over rounds of (1,000-suggestor run time / 1-suggestor run time)",
        "warm": (
            "the same run again at once, after gc.collect(1): the timed run's difference from "
            "it is the cold start after the full collection before each timed run, per run"
        ),
        "retained_bytes_per_cycle": round(memory.retained / cycles),
        "retained_bytes_per_cycle_with_trace": round(memory.with_trace / cycles),
        "retained": (
            "tracemalloc: what the result of a 1-suggestor run holds at the end, per cycle "
            "(its one fact, the cycle's record for the trace); with_trace once the trace is read"
        ),
    }


def _cold(cold: Sequence[float], warm: Sequence[float]) -> float:
    """The median over rounds of (timed run - its warm rerun), in seconds."""
    return median([then - now for then, now in zip(cold, warm, strict=True)])


def measure(settings: Settings) -> Figures:
    """Run W4 and return its figures."""
    progress(f"W4 wide-idle: sizes {', '.join(map(str, SIZES))}, {settings.runs} runs")
    return anyio.run(_measure, settings, backend="asyncio")
