"""W4 wide-idle on LangGraph, alternated run by run with converge's W4 (`wide_idle.py`).

For each size (1, 100 and 1,000 nodes) one graph holds the `ticker` node and size - 1 idle
nodes. The ticker adds one `signals` entry per superstep (an `operator.add` reducer); a
conditional edge from `START` and from `ticker` routes back to it while at most 100 entries
exist, else to `END`: the input's `tick-0` plus 100 ticks, 101 routing calls, like
converge's 101 cycles. The idle nodes are added with `add_node` and no edge, so nothing
ever triggers them, as converge's idle suggestors depend on a key that never changes. (An
edge from each to `END` would be as idiomatic; it about doubles LangGraph's cost here.)
Per-superstep cost should not depend on how many sit idle.
"""

# LangGraph ships no `py.typed`, its signatures hold unknown type arguments (`Command[Unknown]`,
# `CachePolicy[Unknown]`), and without the bench-peers group pyright cannot resolve it at all:
# so the calls into LangGraph here are checked loosely, the rest of the module strictly.
# pyright: reportMissingImports=false, reportMissingTypeStubs=false
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Annotated, Final, TypedDict, cast

import anyio
from langgraph.graph import END, START, StateGraph

from .._common import Figures, Settings, prepare, progress
from ..wide_idle import SIZES, TICKS
from ..wide_idle import START as _START
from ..wide_idle import build_engine as _engine
from ..wide_idle import check as _check
from ._compare import RECURSION_LIMIT, check, row

__all__ = ["TickState", "measure"]


class TickState(TypedDict):
    """The graph's state: the signals, in order."""

    signals: Annotated[list[str], operator.add]


Update = dict[str, list[str]]
_TICKS: Final[list[Update]] = [{"signals": [f"tick-{n}"]} for n in range(TICKS + 1)]


async def ticker(state: TickState) -> Update:
    """Add the next tick (built up front)."""
    return _TICKS[len(state["signals"])]


async def idle(state: TickState) -> Update:
    """Nothing (and never called)."""
    return {}


def route(state: TickState) -> str:
    """Back to `ticker` while at most 100 signals exist."""
    return "ticker" if len(state["signals"]) <= TICKS else END


def _runner(size: int) -> Callable[[], Awaitable[object]]:
    """The compiled graph for `size` nodes (compiled here, untimed) and one run of it."""
    builder = StateGraph(TickState)
    for index in range(size - 1):
        builder.add_node(f"idle-{index}", idle)  # no edge to or from it
    builder.add_node("ticker", ticker)
    builder.add_conditional_edges(START, route, ["ticker", END])
    builder.add_conditional_edges("ticker", route, ["ticker", END])
    graph = builder.compile()

    async def run() -> TickState:
        result = cast(
            TickState,
            await graph.ainvoke({"signals": [_START.id]}, {"recursion_limit": RECURSION_LIMIT}),
        )
        signals = result["signals"]
        check("W4", len(signals) == TICKS + 1 and signals[-1] == f"tick-{TICKS}", signals[-3:])
        return result

    return run


def _converge_runner(size: int) -> Callable[[], Awaitable[object]]:
    """Converge's W4 engine for `size` suggestors (built here, untimed) and one run of it."""
    engine = _engine(size)

    async def run() -> None:
        cycles = _check(await engine.run(inputs=[_START]))
        if cycles != TICKS + 1:
            raise RuntimeError(f"W4 ran {cycles} cycles, not {TICKS + 1}")

    return run


async def _measure(settings: Settings) -> Figures:
    runs: dict[str, Callable[[], Awaitable[object]]] = {}
    for size in SIZES:
        runs[f"cv{size}"] = _converge_runner(size)
        runs[f"lg{size}"] = _runner(size)
    for _ in range(settings.warmups):
        for run in runs.values():
            await run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(settings.runs):  # per size converge, then LangGraph, every round
        for name, run in runs.items():
            prepare()
            started = perf_counter()
            await run()
            times[name].append((perf_counter() - started) * 1e6 / (TICKS + 1))
    return _figures(times)


def _figures(times: dict[str, list[float]]) -> Figures:
    def ratios(engine: str) -> list[float]:
        wide, narrow = times[f"{engine}{SIZES[-1]}"], times[f"{engine}{SIZES[0]}"]
        return [w / n for w, n in zip(wide, narrow, strict=True)]

    rows = [
        row("W4", f"µs / cycle, {size:,} node(s)", times[f"cv{size}"], times[f"lg{size}"])
        for size in SIZES
    ]
    rows.append(
        row("W4", f"ratio {SIZES[-1]:,} / {SIZES[0]}", ratios("cv"), ratios("lg"), ratio=False)
    )
    return {"cycles": TICKS + 1, "active_per_cycle": 1, "sizes": list(SIZES), "rows": rows}


def measure(settings: Settings) -> Figures:
    """Run W4 on both engines, alternating, and return the figures."""
    progress(f"W4 wide-idle on converge and LangGraph: sizes {SIZES}, {settings.runs} runs each")
    return anyio.run(_measure, settings, backend="asyncio")
