"""W1 chain: 200 suggestors sharing one dependency key, one new fact per cycle.

Link `i` depends on `SEEDS`, waits for `step-(i-1)` (link 0 waits for nothing) and proposes
`step-i` under `SEEDS`. An input fact under `SEEDS` starts the run, so every link is a
candidate in every cycle: 200 `accepts` calls, one `execute`, one promoted fact per cycle,
201 cycles in all (the last finds nothing eligible).

The user code's share is measured by replay: one recording run keeps the snapshot of every
cycle, then the same 200 `accepts` calls per snapshot, and the same `execute` calls, run in
a tight loop. The engine's share is the run time minus that. The replay rebuilds the
snapshots as a line of their own, one cycle at a time, so that each cycle's calls read the
newest snapshot of its line, as the run's calls do (`find` takes a longer path on a
snapshot its line has grown past).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from time import perf_counter
from typing import Final, final

import anyio

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Engine,
    Fact,
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
    warm_run,
)
from .floor import cycle_floor

__all__ = ["START", "ChainLink", "Step", "build_engine", "check", "measure", "user_timer"]

LINKS: Final = 200
_KEY: Final = ContextKey.SEEDS
START: Final = ProposedFact(key=_KEY, id="start", content="start the chain", provenance="bench")

Step = tuple[list[Fact], list[bytes], int, int]
"""What one cycle's snapshot holds beyond the one before: the facts, their leaf digests, the
snapshot's cycle and clock (`ContextSnapshot._extend`'s arguments)."""


@final
class ChainLink:
    """Proposes `step-{index}` once `step-{index - 1}` exists; depends on `SEEDS` alone."""

    __slots__ = ("_effect", "_mine", "_name", "_record", "_wait")

    def __init__(self, index: int, record: list[Context] | None = None) -> None:
        self._name = f"link-{index}"
        self._mine = f"step-{index}"
        self._wait = None if index == 0 else f"step-{index - 1}"
        self._record = record
        self._effect = AgentEffect.with_proposal(
            ProposedFact(key=_KEY, id=self._mine, content=f"step {index}", provenance=self._name)
        )

    @property
    def name(self) -> str:
        """`link-{index}`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`SEEDS`, shared by every link."""
        return (_KEY,)

    def accepts(self, ctx: Context, /) -> bool:
        """True when the previous step exists and this link's step does not."""
        wait = self._wait
        if wait is not None and ctx.find(_KEY, wait) is None:
            return False
        return ctx.find(_KEY, self._mine) is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Propose this link's step (built once, up front)."""
        if self._record is not None:
            self._record.append(ctx)
        return self._effect


def build_engine(record: list[Context] | None = None) -> tuple[Engine, list[ChainLink]]:
    engine = Engine(budget=Budget(max_cycles=1000))
    links = [ChainLink(index, record) for index in range(LINKS)]
    for link in links:
        engine.register_suggestor(link)
    return engine, links


def check(result: ConvergeResult) -> int:
    if result.stop_reason is not StopReason.CONVERGED or len(result.context) != LINKS + 1:
        raise RuntimeError(f"W1 did not run as designed: {result!r}")
    return result.cycles


async def _replay(
    links: Sequence[ChainLink], steps: Sequence[Step], executed: Sequence[int]
) -> tuple[float, float]:
    """Seconds spent in the run's `accepts` calls, and in its `execute` calls, replayed.

    Each cycle's snapshot is grown from the one before (untimed) just before its calls, so
    they read the newest snapshot of its line, as the run's did.
    """
    snapshot = ContextSnapshot.empty()
    snapshots: list[ContextSnapshot] = []
    accepts = 0.0
    for facts, leaves, cycle, clock in steps:
        snapshot = snapshot._extend(facts, leaves, cycle, clock)  # pyright: ignore[reportPrivateUsage]
        snapshots.append(snapshot)
        started = perf_counter()
        for link in links:
            link.accepts(snapshot)
        accepts += perf_counter() - started
    started = perf_counter()
    for index, snapshot in zip(executed, snapshots, strict=False):
        await links[index].execute(snapshot)
    return accepts, perf_counter() - started


async def user_timer() -> Callable[[], Awaitable[float]]:
    """A timer of a W1 run's user code, in µs per cycle, from a clean heap on each await.

    The user code is the run's `accepts` and `execute` calls, replayed as `measure` replays
    them. The run is recorded once, on this package's engine; a run's engine share is its time
    per cycle minus the replay's.
    """
    _, links = build_engine()
    steps = await _record()
    per_cycle = 1e6 / len(steps)

    async def timed() -> float:
        prepare()
        accepts, execute = await _replay(links, steps, range(LINKS))
        return (accepts + execute) * per_cycle

    return timed


async def _record() -> list[Step]:
    """What every cycle's `accepts` calls saw, from a separate recording run.

    Each `execute` sees its cycle's snapshot; the last cycle, where nothing is eligible,
    sees the result's context.
    """
    recorded: list[Context] = []
    recorder, _ = build_engine(recorded)
    final = await recorder.run(inputs=[START])
    cycles = check(final)
    if len(recorded) + 1 != cycles:
        raise RuntimeError(f"W1 recorded {len(recorded) + 1} snapshots for {cycles} cycles")
    return _steps([*recorded, final.context])


def _steps(snapshots: Sequence[Context]) -> list[Step]:
    """Each snapshot as what it holds beyond the one before, checked to rebuild it."""
    steps: list[Step] = []
    seen: set[tuple[str, str]] = set()
    rebuilt = ContextSnapshot.empty()
    for snapshot in snapshots:
        if not isinstance(snapshot, ContextSnapshot):
            raise RuntimeError(f"W1 recorded a {type(snapshot).__name__}, not a snapshot")
        sealed = snapshot._sealed()  # pyright: ignore[reportPrivateUsage]
        added = [(fact, leaf) for fact, leaf in sealed if (fact.key, fact.id) not in seen]
        seen.update((fact.key, fact.id) for fact, _ in added)
        step = ([f for f, _ in added], [leaf for _, leaf in added], snapshot.cycle, snapshot.clock)
        rebuilt = rebuilt._extend(*step)  # pyright: ignore[reportPrivateUsage]
        if rebuilt.facts() != snapshot.facts():
            raise RuntimeError(f"W1's replay rebuilds cycle {snapshot.cycle} differently")
        steps.append(step)
    return steps


async def _floor(links: Sequence[ChainLink], result: ConvergeResult) -> float:
    """Seconds of the cycle floor over `links`, checked to promote what `result` did."""
    seconds, cycles, root = await cycle_floor(links, [START])
    if cycles != result.cycles or root != result.integrity.merkle_root:
        raise RuntimeError(f"W1's cycle floor ran {cycles} cycles to another root than the run")
    return seconds


async def _measure(settings: Settings) -> Figures:
    engine, links = build_engine()
    steps = await _record()
    executed = range(LINKS)  # link i executes in cycle i + 1, on snapshot i
    cycles = len(steps)
    for _ in range(settings.warmups):
        check(await engine.run(inputs=[START]))
        await _replay(links, steps, executed)
    totals: list[float] = []
    accepts_times: list[float] = []
    execute_times: list[float] = []
    engine_times: list[float] = []
    trace_times: list[float] = []
    proof_times: list[float] = []
    warm_times: list[float] = []
    floors: list[float] = []
    for _ in range(settings.runs):  # each run paired with a replay and the cycle floor
        prepare()
        started = perf_counter()
        result = await engine.run(inputs=[START])
        total = perf_counter() - started
        check(result)
        proof_times.append(read_proof(result))  # first: the trace's final root is the proof's
        started = perf_counter()
        if len(result.trace.cycles) != result.cycles:  # built on its first read
            raise RuntimeError(f"W1's trace does not hold its {result.cycles} cycles")
        trace_times.append(perf_counter() - started)
        warm_times.append(await warm_run(partial(engine.run, inputs=[START]), check))
        prepare()
        accepts, execute = await _replay(links, steps, executed)
        totals.append(total)
        accepts_times.append(accepts)
        execute_times.append(execute)
        engine_times.append(total - accepts - execute)
        floors.append(await _floor(links, result))

    per_cycle = 1e6 / cycles
    accepts = median(accepts_times) * per_cycle
    execute = median(execute_times) * per_cycle
    return {
        "suggestors": LINKS,
        "cycles": cycles,
        "accepts_calls_per_cycle": LINKS,
        "runs": settings.runs,
        "run_ms": rounded(median(totals) * 1e3, 3),
        "us_per_cycle": rounded(median(totals) * per_cycle),
        "us_per_cycle_quartiles": quartiles(totals, per_cycle),
        "user_accepts_us_per_cycle": rounded(accepts),
        "user_execute_us_per_cycle": rounded(execute),
        "user_us_per_cycle": rounded(accepts + execute),
        "engine_us_per_cycle": rounded(median(engine_times) * per_cycle),
        "engine_us_per_cycle_quartiles": quartiles(engine_times, per_cycle),
        "trace_read_us_per_cycle": rounded(median(trace_times) * per_cycle),
        "proof_read_us_per_cycle": rounded(median(proof_times) * per_cycle),
        "warm_us_per_cycle": rounded(median(warm_times) * per_cycle),
        "cold_start_us_per_run": rounded(
            median([t - w for t, w in zip(totals, warm_times, strict=True)]) * 1e6
        ),
        "cycle_floor_us_per_cycle": rounded(median(floors) * per_cycle),
        "engine_floor_us_per_cycle": rounded(
            median(
                [f - a - e for f, a, e in zip(floors, accepts_times, execute_times, strict=True)]
            )
            * per_cycle
        ),
        "over_cycle_floor_us_per_cycle": rounded(
            median([t - f for t, f in zip(totals, floors, strict=True)]) * per_cycle
        ),
        "method": (
            "engine = median over runs of (run time - replayed accepts/execute time) / cycles; "
            "the run does not read its trace or its integrity proof, each built on its first "
            "read: trace_read_us_per_cycle, proof_read_us_per_cycle"
        ),
    }


def measure(settings: Settings) -> Figures:
    """Run W1 and return its figures."""
    progress(f"W1 chain: {LINKS} suggestors, {settings.runs} runs")
    return anyio.run(_measure, settings, backend="asyncio")
