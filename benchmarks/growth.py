"""W3 growth: one suggestor adds 100 new facts per cycle until the context holds 10,000.

The grower has no dependencies (so it is a candidate every cycle) and accepts while fewer
than 10,000 facts sit under `HYPOTHESES`. Its effects are built up front, so the cycle time
is almost all engine. It stamps `perf_counter()` when each `execute` starts and ends: the
time between two consecutive starts is one cycle. A cost that grows with the context shows
up as a ratio of the last 10 cycles to the first 10 above 1. A `gc.callbacks` hook times
the garbage collector, so the report can show how much of the growth is collection.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
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
    read_proof,
    rounded,
    traced_memory,
)
from .floor import promotion_floor, seal_floor

__all__ = ["GcClock", "Grower", "Window", "build_engine", "check", "measure"]

PER_CYCLE: Final = 100
TOTAL: Final = 10_000
WINDOW: Final = 10
_NEXT: Final = ProposedFact(key=ContextKey.SEEDS, id="next", content="one more", provenance="w3")
"""The one input of the run that continues from each W3 run's context."""
_KEY: Final = ContextKey.HYPOTHESES


def _effect(first: int) -> AgentEffect:
    """The effect that proposes facts `first` to `first + 99`."""
    return AgentEffect.with_proposals(
        ProposedFact(key=_KEY, id=f"g-{n}", content=f"fact {n}", provenance="grower")
        for n in range(first, first + PER_CYCLE)
    )


@final
class Grower:
    """Proposes the next 100 facts every cycle while fewer than 10,000 exist.

    Its effects are built up front, so the cycle time is the engine's; with `fresh`, each
    cycle's are made in `execute` instead, as a model's would be (for the memory a result
    keeps of what its suggestors made).
    """

    __slots__ = ("_effects", "_fresh", "ended", "started")

    def __init__(self, *, fresh: bool = False) -> None:
        self._fresh = fresh
        self._effects = [] if fresh else [_effect(first) for first in range(0, TOTAL, PER_CYCLE)]
        self.started: list[float] = []
        """`perf_counter()` at the start of each `execute`."""
        self.ended: list[float] = []
        """`perf_counter()` at the end of each `execute`."""

    @property
    def name(self) -> str:
        """`grower`."""
        return "grower"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """None: a candidate in every cycle."""
        return ()

    def accepts(self, ctx: Context, /) -> bool:
        """True while fewer than 10,000 facts exist."""
        return ctx.count(_KEY) < TOTAL

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the next 100 facts, stamping the time on the way in and out."""
        self.started.append(perf_counter())
        first = ctx.count(_KEY)
        effect = _effect(first) if self._fresh else self._effects[first // PER_CYCLE]
        self.ended.append(perf_counter())
        return effect

    @property
    def proposals(self) -> list[ProposedFact]:
        """Every proposal of a run, in the order they are proposed."""
        effects = self._effects or [_effect(first) for first in range(0, TOTAL, PER_CYCLE)]
        return [proposal for effect in effects for proposal in effect.proposals]

    def reset(self) -> None:
        """Forget the stamps of the previous run."""
        self.started.clear()
        self.ended.clear()


def check(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != TOTAL:
        raise RuntimeError(f"W3 did not run as designed: {result!r}")
    return result.cycles


@final
class GcClock:
    """Records when each garbage collection started and how long it took, while installed."""

    __slots__ = ("_began", "passes")

    def __init__(self) -> None:
        self._began = 0.0
        self.passes: list[tuple[float, float]] = []
        """`(start, seconds)` of each collection."""

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        """The `gc.callbacks` hook."""
        if phase == "start":
            self._began = perf_counter()
        else:
            self.passes.append((self._began, perf_counter() - self._began))

    def within(self, begin: float, end: float) -> float:
        """Seconds of collection that started in `[begin, end)`."""
        return sum(seconds for start, seconds in self.passes if begin <= start < end)


@final
@dataclass(frozen=True, slots=True)
class Window:
    """Mean µs per cycle over 10 consecutive cycles, split into its parts."""

    total: float
    gc: float
    execute: float

    @classmethod
    def of(cls, grower: Grower, clock: GcClock, cycles: range) -> Window:
        """The window over the cycles whose `execute` calls are `cycles` (0-based)."""
        starts, ends = grower.started, grower.ended
        begin, end = starts[cycles.start], starts[cycles.stop]
        scale = 1e6 / len(cycles)
        return cls(
            total=(end - begin) * scale,
            gc=clock.within(begin, end) * scale,
            execute=sum(ends[i] - starts[i] for i in cycles) * scale,
        )


async def _run(engine: Engine, grower: Grower, clock: GcClock) -> tuple[ConvergeResult, float]:
    """One run from a clean heap, with the collector timed; returns its result and seconds."""
    grower.reset()
    prepare()
    clock.passes.clear()
    gc.callbacks.append(clock)
    try:
        began = perf_counter()
        result = await engine.run()
        return result, perf_counter() - began
    finally:
        gc.callbacks.remove(clock)


async def _continued(result: ConvergeResult) -> float:
    """Seconds of a run that continues from `result`'s context, from a clean heap.

    One input and no suggestor, the context's proof not read: what a run costs on a context
    of 10,000 facts beyond its own work.

    Raises:
        RuntimeError: The run did not converge with the one more fact.
    """
    follow = Engine(budget=Budget(max_facts=20_000))
    prepare()
    started = perf_counter()
    after = await follow.run(result.context, inputs=[_NEXT])
    seconds = perf_counter() - started
    if not after.converged or len(after.context) != TOTAL + 1:
        raise RuntimeError(f"W3's continued run did not run as designed: {after!r}")
    return seconds


def _ratio(last: Sequence[float], first: Sequence[float]) -> float:
    """The median over runs of one run's last-10 figure over its first-10 figure."""
    return rounded(median([late / early for late, early in zip(last, first, strict=True)]), 3)


def _over(runs: Sequence[float], floors: Sequence[float]) -> float:
    """The median over runs of (run - its floor), in µs per fact."""
    return rounded(
        median([run - floor for run, floor in zip(runs, floors, strict=True)]) * 1e6 / TOTAL, 3
    )


def build_engine(*, fresh: bool = False) -> tuple[Engine, Grower]:
    """W3's engine and its grower (`Grower(fresh=fresh)`).

    With `fresh`, the proposals are made in `execute`, as a model's would be: the result
    keeps the facts (with the text they share with their proposals), not the proposals or
    the effects that held them.
    """
    engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))
    grower = Grower(fresh=fresh)
    engine.register_suggestor(grower)
    return engine, grower


async def _measure(settings: Settings) -> Figures:
    engine, grower = build_engine()
    clock = GcClock()
    cycles = 0
    for _ in range(settings.warmups):
        cycles = check((await _run(engine, grower, clock))[0])
    proposals = grower.proposals
    sealers = [grower.name] * len(proposals)
    first: list[Window] = []
    last: list[Window] = []
    runs: list[float] = []
    floors: list[float] = []
    gated: list[float] = []
    proofs: list[float] = []
    continued: list[float] = []
    for _ in range(settings.runs):  # each run paired with the floors: drift hits them all
        result, seconds = await _run(engine, grower, clock)
        runs.append(seconds)
        cycles = check(result)
        continued.append(await _continued(result))
        proofs.append(read_proof(result))
        del result  # neither the next run nor the floor carries this one's 10,000 facts
        executes = len(grower.started)  # the cycle after the last execute finds nothing to do
        first.append(Window.of(grower, clock, range(WINDOW)))
        last.append(Window.of(grower, clock, range(executes - 1 - WINDOW, executes - 1)))
        floors.append(seal_floor(proposals, sealers, PER_CYCLE)[0])
        gated.append(promotion_floor(proposals, sealers, PER_CYCLE)[0])

    grower.reset()
    memory = await traced_memory(engine.run, check)
    fresh = await traced_memory(build_engine(fresh=True)[0].run, check)
    first_total = [window.total for window in first]
    last_total = [window.total for window in last]
    first_no_gc = [window.total - window.gc for window in first]
    last_no_gc = [window.total - window.gc for window in last]
    return {
        "facts": TOTAL,
        "facts_per_cycle": PER_CYCLE,
        "cycles": cycles,
        "runs": settings.runs,
        "run_ms": rounded(median(runs) * 1e3, 3),
        "us_per_fact": rounded(median(runs) * 1e6 / TOTAL, 3),
        "proof_read_us_per_fact": rounded(median(proofs) * 1e6 / TOTAL, 3),
        "continued_run_ms": rounded(median(continued) * 1e3, 3),
        "us_per_fact_with_proof_read": rounded(
            median([run + proof for run, proof in zip(runs, proofs, strict=True)]) * 1e6 / TOTAL,
            3,
        ),
        "seal_floor_us_per_fact": rounded(median(floors) * 1e6 / TOTAL, 3),
        "over_seal_floor_us_per_fact": _over(runs, floors),
        "promotion_floor_us_per_fact": rounded(median(gated) * 1e6 / TOTAL, 3),
        "over_promotion_floor_us_per_fact": _over(runs, gated),
        "first10_us_per_cycle": rounded(median(first_total)),
        "first10_us_per_cycle_quartiles": quartiles(first_total),
        "last10_us_per_cycle": rounded(median(last_total)),
        "last10_us_per_cycle_quartiles": quartiles(last_total),
        "ratio_last10_first10": _ratio(last_total, first_total),
        "first10_gc_us_per_cycle": rounded(median([window.gc for window in first])),
        "last10_gc_us_per_cycle": rounded(median([window.gc for window in last])),
        "ratio_last10_first10_excluding_gc": _ratio(last_no_gc, first_no_gc),
        "user_execute_us_per_cycle": rounded(median([window.execute for window in last])),
        "peak_traced_mib": rounded(memory.peak / 2**20, 2),
        "peak_traced_reading_trace_mib": rounded(max(memory.peak, memory.peak_reading) / 2**20, 2),
        "retained_bytes_per_fact": round(memory.retained / TOTAL),
        "retained_bytes_per_fact_with_trace": round(memory.with_trace / TOTAL),
        "retained_bytes_per_fact_fresh_proposals": round(fresh.retained / TOTAL),
        "peak_traced_fresh_proposals_mib": rounded(fresh.peak / 2**20, 2),
    }


def measure(settings: Settings) -> Figures:
    """Run W3 and return its figures."""
    progress(f"W3 growth: {TOTAL} facts, {PER_CYCLE} per cycle, {settings.runs} runs")
    return anyio.run(_measure, settings, backend="asyncio")
