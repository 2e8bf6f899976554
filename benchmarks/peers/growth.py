"""W3 growth on LangGraph, alternated run by run with converge's W3 (`benchmarks/growth.py`).

One node, `grower`, adds the next 100 entries to `facts` (a list with an `operator.add`
reducer) per superstep; a conditional edge from `START` and from `grower` routes back to it
while fewer than 10,000 entries exist, else to `END`: 100 productive supersteps. The node
stamps `perf_counter()` on entering and leaving, as converge's `Grower` does, so the time
between two consecutive entries is one superstep, and the same `gc.callbacks` clock times
the collector, which stays enabled. µs per added entry is the cycle's time / 100.
"""

# LangGraph ships no `py.typed`, its signatures hold unknown type arguments (`Command[Unknown]`,
# `CachePolicy[Unknown]`), and without the bench-peers group pyright cannot resolve it at all:
# so the calls into LangGraph here are checked loosely, the rest of the module strictly.
# pyright: reportMissingImports=false, reportMissingTypeStubs=false
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false

from __future__ import annotations

import gc
import operator
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import Annotated, TypedDict, cast, final

import anyio
from langgraph.graph import END, START, StateGraph

from converge import Budget, Engine

from .._common import Figures, Settings, median, prepare, progress, rounded
from ..growth import PER_CYCLE, TOTAL, WINDOW, GcClock, Grower, Window, _run  # pyright: ignore[reportPrivateUsage]
from ..growth import check as _check
from ._compare import RECURSION_LIMIT, check, row

__all__ = ["GrowthState", "PeerGrower", "measure"]


class GrowthState(TypedDict):
    """The graph's state: the list of entries, grown by `operator.add`."""

    facts: Annotated[list[str], operator.add]


Update = dict[str, list[str]]


@final
class PeerGrower:
    """The `grower` node's updates (built up front) and its entry and exit stamps."""

    __slots__ = ("_updates", "ended", "started")

    def __init__(self) -> None:
        self._updates: list[Update] = [
            {"facts": [f"g-{n}" for n in range(first, first + PER_CYCLE)]}
            for first in range(0, TOTAL, PER_CYCLE)
        ]
        self.started: list[float] = []
        """`perf_counter()` at the start of each node call."""
        self.ended: list[float] = []
        """`perf_counter()` at the end of each node call."""

    async def grow(self, state: GrowthState) -> Update:
        """Add the next 100 entries, stamping the time on the way in and out."""
        self.started.append(perf_counter())
        update = self._updates[len(state["facts"]) // PER_CYCLE]
        self.ended.append(perf_counter())
        return update

    def window(self, clock: GcClock, cycles: range) -> Window:
        """Mean µs per superstep over `cycles` (0-based node calls), as `Window.of` computes."""
        starts, ends = self.started, self.ended
        begin, end = starts[cycles.start], starts[cycles.stop]
        scale = 1e6 / len(cycles)
        return Window(
            total=(end - begin) * scale,
            gc=clock.within(begin, end) * scale,
            execute=sum(ends[i] - starts[i] for i in cycles) * scale,
        )


def route(state: GrowthState) -> str:
    """Back to `grower` while fewer than 10,000 entries exist."""
    return "grower" if len(state["facts"]) < TOTAL else END


def _runner(grower: PeerGrower) -> Callable[[], Awaitable[GrowthState]]:
    """The compiled graph (compiled here, untimed) and the call that runs it once."""
    builder = StateGraph(GrowthState)
    builder.add_node("grower", grower.grow)
    builder.add_conditional_edges(START, route, ["grower", END])
    builder.add_conditional_edges("grower", route, ["grower", END])
    graph = builder.compile()

    async def run() -> GrowthState:
        result = await graph.ainvoke({"facts": []}, {"recursion_limit": RECURSION_LIMIT})
        return cast(GrowthState, result)

    return run


async def _measure(settings: Settings) -> Figures:
    engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))  # as growth.py
    grower = Grower()
    engine.register_suggestor(grower)
    peer = PeerGrower()
    invoke = _runner(peer)
    clock = GcClock()

    async def run_peer() -> float:
        peer.started.clear()
        peer.ended.clear()
        prepare()
        clock.passes.clear()
        gc.callbacks.append(clock)
        try:
            began = perf_counter()
            result = await invoke()
            seconds = perf_counter() - began
        finally:
            gc.callbacks.remove(clock)
        facts = result["facts"]
        check("W3", len(facts) == TOTAL and facts[-1] == f"g-{TOTAL - 1}", len(facts))
        return seconds

    for _ in range(settings.warmups):
        _check((await _run(engine, grower, clock))[0])
        await run_peer()
    windows: dict[str, list[Window]] = {name: [] for name in ("cv0", "cv1", "lg0", "lg1")}
    runs: dict[str, list[float]] = {"cv": [], "lg": []}
    for _ in range(settings.runs):  # converge, then LangGraph, every round
        result, seconds = await _run(engine, grower, clock)
        _check(result)
        runs["cv"].append(seconds)
        last = len(grower.started) - 1  # the cycle after the last execute finds nothing
        windows["cv0"].append(Window.of(grower, clock, range(WINDOW)))
        windows["cv1"].append(Window.of(grower, clock, range(last - WINDOW, last)))
        runs["lg"].append(await run_peer())
        last = len(peer.started) - 1
        windows["lg0"].append(peer.window(clock, range(WINDOW)))
        windows["lg1"].append(peer.window(clock, range(last - WINDOW, last)))
    return _figures(windows, runs)


def _ratios(last: Sequence[Window], first: Sequence[Window], *, gc: bool) -> list[float]:
    return [
        (late.total - (0 if gc else late.gc)) / (early.total - (0 if gc else early.gc))
        for late, early in zip(last, first, strict=True)
    ]


def _figures(windows: dict[str, list[Window]], runs: dict[str, list[float]]) -> Figures:
    def per_entry(name: str) -> list[float]:
        return [window.total / PER_CYCLE for window in windows[name]]

    def gc_share(name: str) -> list[float]:
        return [window.gc for window in windows[name]]

    def ratios(engine: str, *, gc: bool) -> list[float]:
        return _ratios(windows[f"{engine}1"], windows[f"{engine}0"], gc=gc)

    def whole(engine: str) -> list[float]:
        return [seconds * 1e6 / TOTAL for seconds in runs[engine]]

    return {
        "entries": TOTAL,
        "entries_per_cycle": PER_CYCLE,
        "runs": len(runs["cv"]),
        "rows": [
            row("W3", "µs / added entry, whole run", whole("cv"), whole("lg")),
            row("W3", "µs / added entry, first 10 cycles", per_entry("cv0"), per_entry("lg0")),
            row("W3", "µs / added entry, last 10 cycles", per_entry("cv1"), per_entry("lg1")),
            row(
                "W3",
                "ratio last 10 / first 10 (GC on)",
                ratios("cv", gc=True),
                ratios("lg", gc=True),
                ratio=False,
            ),
            row(
                "W3",
                "the same without the collector's time",
                ratios("cv", gc=False),
                ratios("lg", gc=False),
                ratio=False,
            ),
            row(
                "W3",
                "collector µs / cycle, last 10",
                gc_share("cv1"),
                gc_share("lg1"),
                ratio=False,
            ),
        ],
        "run_ms": {
            "converge": rounded(median(runs["cv"]) * 1e3, 3),
            "langgraph": rounded(median(runs["lg"]) * 1e3, 3),
        },
    }


def measure(settings: Settings) -> Figures:
    """Run W3 on both engines, alternating, and return the figures."""
    progress(f"W3 growth on converge and LangGraph: {TOTAL} entries, {settings.runs} runs each")
    return anyio.run(_measure, settings, backend="asyncio")
