"""W2 fan-out: one seed, 500 suggestors that each wait 10 ms, then one join.

The seed (no dependencies) proposes one `SEEDS` fact. Each of the 500 workers depends on
`SEEDS`, awaits `anyio.sleep(0.01)` and proposes its own `HYPOTHESES` fact; they all run in
one cycle. The join depends on `HYPOTHESES` and accepts once all 500 exist and its own fact
does not. The figure is the wall time of the whole run; the floor is a bare anyio task group
of the same 500 sleeps (and, for reference, a bare `asyncio.gather` of them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from time import perf_counter
from typing import Final, final

import anyio

from converge import (
    AgentEffect,
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
)
from .floor import promotion_floor, seal_floor

__all__ = ["Join", "Seed", "Sleeper", "anyio_floor", "build_engine", "check", "measure"]

TASKS: Final = 500
SLEEP: Final = 0.01


def _effect(key: ContextKey, ident: str, provenance: str) -> AgentEffect:
    return AgentEffect.with_proposal(
        ProposedFact(key=key, id=ident, content=ident, provenance=provenance)
    )


@final
class Seed:
    """Proposes the one `SEEDS` fact that starts the fan-out."""

    __slots__ = ("effect",)

    def __init__(self) -> None:
        self.effect = _effect(ContextKey.SEEDS, "fan-seed", "seed")

    @property
    def name(self) -> str:
        """`seed`."""
        return "seed"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """None: a candidate in every cycle."""
        return ()

    def accepts(self, ctx: Context, /) -> bool:
        """True while the seed fact is absent."""
        return ctx.find(ContextKey.SEEDS, "fan-seed") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the seed fact."""
        return self.effect


@final
class Sleeper:
    """Waits 10 ms, then proposes its own `HYPOTHESES` fact."""

    __slots__ = ("_id", "_name", "effect")

    def __init__(self, index: int) -> None:
        self._name = f"sleeper-{index}"
        self._id = f"h-{index}"
        self.effect = _effect(ContextKey.HYPOTHESES, self._id, self._name)

    @property
    def name(self) -> str:
        """`sleeper-{index}`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`SEEDS`."""
        return (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        """True once the seed exists, while its own fact does not."""
        return ctx.has(ContextKey.SEEDS) and ctx.find(ContextKey.HYPOTHESES, self._id) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Sleep 10 ms, then propose its fact."""
        await anyio.sleep(SLEEP)
        return self.effect


@final
class Join:
    """Proposes one `EVALUATIONS` fact once every sleeper's hypothesis exists."""

    __slots__ = ("effect",)

    def __init__(self) -> None:
        self.effect = _effect(ContextKey.EVALUATIONS, "joined", "join")

    @property
    def name(self) -> str:
        """`join`."""
        return "join"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`HYPOTHESES`."""
        return (ContextKey.HYPOTHESES,)

    def accepts(self, ctx: Context, /) -> bool:
        """True when all hypotheses exist and the join fact does not."""
        return (
            ctx.count(ContextKey.HYPOTHESES) >= TASKS
            and ctx.find(ContextKey.EVALUATIONS, "joined") is None
        )

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose the join fact."""
        return self.effect


def _suggestors() -> list[Seed | Sleeper | Join]:
    """The seed, the 500 sleepers and the join, in registration order."""
    return [Seed(), *(Sleeper(index) for index in range(TASKS)), Join()]


def build_engine() -> Engine:
    """The seed, the 500 sleepers and the join, registered in that order."""
    engine = Engine()
    for suggestor in _suggestors():
        engine.register_suggestor(suggestor)
    return engine


def _sealed() -> tuple[list[ProposedFact], list[str]]:
    """The run's 502 proposals and who proposes each, for the seal floor."""
    suggestors = _suggestors()
    return [s.effect.proposals[0] for s in suggestors], [s.name for s in suggestors]


def check(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != TASKS + 2:
        raise RuntimeError(f"W2 did not run as designed: {result!r}")
    return result.cycles


async def anyio_floor() -> None:
    """The floor: one anyio task group of the same 500 sleeps."""
    async with anyio.create_task_group() as group:
        for _ in range(TASKS):
            group.start_soon(anyio.sleep, SLEEP)


async def _gather_floor() -> None:
    """The same sleeps through `asyncio.gather`: what task start-up costs without anyio."""
    await asyncio.gather(*(asyncio.sleep(SLEEP) for _ in range(TASKS)))


def _overhead_us(wall_ms: float) -> float:
    return (wall_ms - SLEEP * 1e3) * 1e3 / TASKS


async def _measure(settings: Settings) -> Figures:
    engine = build_engine()
    cycles = 0
    for _ in range(settings.warmups):
        cycles = check(await engine.run())
        await anyio_floor()
        await _gather_floor()
    proposals, sealers = _sealed()
    walls: list[float] = []
    floors: list[float] = []
    gathers: list[float] = []
    seals: list[float] = []
    promotions: list[float] = []
    proofs: list[float] = []
    for _ in range(settings.runs):  # interleaved, so drift in the machine hits both alike
        prepare()
        started = perf_counter()
        result = await engine.run()
        walls.append((perf_counter() - started) * 1e3)
        cycles = check(result)
        proofs.append(read_proof(result) * 1e3)
        prepare()
        started = perf_counter()
        await anyio_floor()
        floors.append((perf_counter() - started) * 1e3)
        prepare()
        started = perf_counter()
        await _gather_floor()
        gathers.append((perf_counter() - started) * 1e3)
        seals.append(seal_floor(proposals, sealers, len(proposals))[0] * 1e3)
        promotions.append(promotion_floor(proposals, sealers, len(proposals))[0] * 1e3)
    wall = median(walls)
    floor = median(floors)
    return {
        "tasks": TASKS,
        "sleep_ms": SLEEP * 1e3,
        "cycles": cycles,
        "runs": settings.runs,
        "wall_ms": rounded(wall, 3),
        "wall_ms_quartiles": quartiles(walls),
        "overhead_us_per_task": rounded(_overhead_us(wall)),
        "floor_wall_ms": rounded(floor, 3),
        "floor_wall_ms_quartiles": quartiles(floors),
        "floor_overhead_us_per_task": rounded(_overhead_us(floor)),
        "engine_over_floor_ms": rounded(wall - floor, 3),
        "proof_read_ms": rounded(median(proofs), 3),
        "seal_floor_ms": rounded(median(seals), 3),
        "promotion_floor_ms": rounded(median(promotions), 3),
        "seal": "the seal and promotion floors of the run's 502 facts (benchmarks/floor.py)",
        "floor": "one anyio task group of the same 500 anyio.sleep(0.01) calls",
        "asyncio_gather_wall_ms": rounded(median(gathers), 3),
    }


def measure(settings: Settings) -> Figures:
    """Run W2 and return its figures."""
    progress(f"W2 fan-out: {TASKS} x {SLEEP * 1e3:g} ms, {settings.runs} runs")
    return anyio.run(_measure, settings, backend="asyncio")
