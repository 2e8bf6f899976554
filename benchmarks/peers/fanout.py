"""W2 fan-out on LangGraph, alternated run by run with converge's W2 (`benchmarks/fanout.py`).

`START` leads to the `seed` node, which adds the one `seeds` entry; its conditional edge
returns 500 `Send("sleeper", {"index": i})`, LangGraph's map step, so the `sleeper` node
runs 500 times in one superstep, each awaiting `asyncio.sleep(0.01)` and adding its own
`hypotheses` entry (`h-0` … `h-499`, through an `operator.add` reducer). The `join` node
follows in the next superstep and adds its `evaluations` entry when all 500 exist: 502
entries, as converge's run ends with 502 facts. Each round also times the anyio task-group
floor and a bare `asyncio.gather` of the same sleeps, as `fanout.py` does.
"""

# LangGraph ships no `py.typed`, its signatures hold unknown type arguments (`Command[Unknown]`,
# `CachePolicy[Unknown]`), and without the bench-peers group pyright cannot resolve it at all:
# so the calls into LangGraph here are checked loosely, the rest of the module strictly.
# pyright: reportMissingImports=false, reportMissingTypeStubs=false
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable, Hashable
from time import perf_counter
from typing import Annotated, Final, TypedDict, cast

import anyio
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from .._common import Figures, Settings, prepare, progress
from ..fanout import SLEEP, TASKS, _gather_floor, anyio_floor, build_engine  # pyright: ignore[reportPrivateUsage]
from ..fanout import check as check_converge
from ._compare import RECURSION_LIMIT, check, reference_row, row

__all__ = ["FanState", "Task", "measure"]


class FanState(TypedDict):
    """The graph's state: one list per converge key the workload uses."""

    seeds: Annotated[list[str], operator.add]
    hypotheses: Annotated[list[str], operator.add]
    evaluations: Annotated[list[str], operator.add]


class Task(TypedDict):
    """What each `Send` hands one `sleeper` run."""

    index: int


Update = dict[str, list[str]]
_SEED: Final[Update] = {"seeds": ["fan-seed"]}
_JOINED: Final[Update] = {"evaluations": ["joined"]}
_HYPOTHESES: Final[list[Update]] = [{"hypotheses": [f"h-{index}"]} for index in range(TASKS)]


async def seed(state: FanState) -> Update:
    """Add the seed entry."""
    return _SEED


def fan_out(state: FanState) -> list[Hashable]:
    """One `Send` per sleeper: the map step."""
    return [Send("sleeper", Task(index=index)) for index in range(TASKS)]


async def sleeper(state: Task) -> Update:
    """Sleep 10 ms, then add this task's hypothesis (built up front)."""
    await asyncio.sleep(SLEEP)
    return _HYPOTHESES[state["index"]]


async def join(state: FanState) -> Update:
    """Add the join entry once every hypothesis exists."""
    return _JOINED if len(state["hypotheses"]) >= TASKS else {}


def _runner() -> Callable[[], Awaitable[FanState]]:
    """The compiled graph (compiled here, untimed) and the call that runs it once."""
    builder = StateGraph(FanState)
    builder.add_node("seed", seed)
    builder.add_node("sleeper", sleeper)
    builder.add_node("join", join)
    builder.add_edge(START, "seed")
    builder.add_conditional_edges("seed", fan_out, ["sleeper"])
    builder.add_edge("sleeper", "join")
    builder.add_edge("join", END)
    graph = builder.compile()

    async def run() -> FanState:
        result = cast(
            FanState,
            await graph.ainvoke(
                {"seeds": [], "hypotheses": [], "evaluations": []},
                {"recursion_limit": RECURSION_LIMIT},
            ),
        )
        entries = sum(len(result[key]) for key in ("seeds", "hypotheses", "evaluations"))
        distinct = len(set(result["hypotheses"]))
        check("W2", entries == TASKS + 2 and distinct == TASKS, (entries, distinct))
        return result

    return run


async def _timed(run: Callable[[], Awaitable[object]]) -> float:
    prepare()
    started = perf_counter()
    await run()
    return (perf_counter() - started) * 1e3


async def _measure(settings: Settings) -> Figures:
    engine = build_engine()
    run_peer = _runner()

    async def run_converge() -> None:
        check_converge(await engine.run())

    order = {"cv": run_converge, "lg": run_peer, "floor": anyio_floor, "gather": _gather_floor}
    for _ in range(settings.warmups):
        for run in order.values():
            await run()
    walls: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(settings.runs):  # converge, LangGraph, then the two floors, every round
        for name, run in order.items():
            walls[name].append(await _timed(run))

    def overhead(name: str) -> list[float]:
        return [(wall - SLEEP * 1e3) * 1e3 / TASKS for wall in walls[name]]

    return {
        "tasks": TASKS,
        "sleep_ms": SLEEP * 1e3,
        "runs": settings.runs,
        "rows": [
            row("W2", "wall ms, 500 x 10 ms", walls["cv"], walls["lg"]),
            row("W2", "overhead µs / task", overhead("cv"), overhead("lg")),
            reference_row("W2", "floor: anyio task group, wall ms", walls["floor"]),
            reference_row("W2", "floor: asyncio.gather, wall ms", walls["gather"]),
        ],
        "overhead": "(wall ms - 10) * 1000 / 500",
    }


def measure(settings: Settings) -> Figures:
    """Run W2 on both engines, alternating, and return the figures."""
    progress(f"W2 fan-out on converge and LangGraph: {TASKS} x 10 ms, {settings.runs} runs each")
    return anyio.run(_measure, settings, backend="asyncio")
