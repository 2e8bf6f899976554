"""W1 as a LangGraph user would write it: a chain of static edges, alternated with converge's W1.

The job is W1's (`benchmarks/chain.py`): 200 links, each adding its step once the one before
exists. A LangGraph user who knows the order up front writes it into the graph: `START` →
`link-0` → `link-1` → … → `link-199` → `END`, plain edges, no routing function and no
predicate. Each superstep runs one node and adds one fact to the same `facts` channel that
`chain.py` uses (a dict merged by a reducer): 201 supersteps (the input's and 200 links'),
like converge's 201 cycles. The figure per step is the run's time over those 201.

`chain.py` is the other shape, the twin of converge's design: every node routed by 200
predicates. This one shows what the framework costs when the graph already knows the order,
the shape a LangGraph user would reach for first; converge has no such shape (its suggestors
are chosen by what the context holds), so its side of the table is the same W1 run.

The user code is the 200 node calls, replayed in a tight loop on the states the run saw.
"""

# LangGraph ships no `py.typed`, its signatures hold unknown type arguments (`Command[Unknown]`,
# `CachePolicy[Unknown]`), and without the bench-peers group pyright cannot resolve it at all:
# so the calls into LangGraph here are checked loosely, the rest of the module strictly.
# pyright: reportMissingImports=false, reportMissingTypeStubs=false
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from itertools import pairwise
from time import perf_counter
from typing import Final, cast, final

import anyio
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from .._common import Figures, Settings, median, prepare, progress, rounded
from ..chain import LINKS
from ..chain import START as _START
from ..chain import build_engine as _engine
from ..chain import check as _check
from ._compare import RECURSION_LIMIT, check, row
from .chain import ChainState

__all__ = ["SUPERSTEPS", "StaticLink", "build_graph", "measure"]

_INPUT: Final = {_START.id: _START.content}
SUPERSTEPS: Final = LINKS + 1
"""The input's superstep and one per link, as converge's run has 201 cycles."""

Update = dict[str, dict[str, str]]


@final
class StaticLink:
    """Node `link-{index}`: adds its step; the edge into it says when it runs."""

    __slots__ = ("name", "node")

    def __init__(self, index: int, record: list[ChainState] | None = None) -> None:
        self.name = f"link-{index}"
        update: Update = {"facts": {f"step-{index}": f"step {index}"}}

        async def link(state: ChainState) -> Update:
            if record is not None:
                record.append(state)
            return update  # built once, up front, as converge's `ChainLink` builds its effect

        self.node = link


def build_graph(
    links: Sequence[StaticLink],
) -> CompiledStateGraph[ChainState, None, ChainState, ChainState]:
    """`START` → each link in order → `END`, by plain edges, compiled."""
    builder = StateGraph(ChainState)
    for link in links:
        builder.add_node(link.name, link.node)
    names = [START, *(link.name for link in links), END]
    for source, target in pairwise(names):
        builder.add_edge(source, target)
    return builder.compile()


def _runner(links: Sequence[StaticLink]) -> Callable[[], Awaitable[ChainState]]:
    """One compiled graph (compiled here, untimed) and the call that runs it once."""
    graph = build_graph(links)

    async def run() -> ChainState:
        result = cast(
            ChainState,
            await graph.ainvoke({"facts": dict(_INPUT)}, {"recursion_limit": RECURSION_LIMIT}),
        )
        facts = result["facts"]
        count = len(links)
        complete = len(facts) == count + 1 and all(f"step-{i}" in facts for i in range(count))
        check("W1 static chain", complete, sorted(facts)[-3:])
        return result

    return run


async def _record(count: int) -> list[ChainState]:
    """The state each node saw, in order, from a separate recording run."""
    states: list[ChainState] = []
    await _runner([StaticLink(index, states) for index in range(count)])()
    check("W1 static chain", len(states) == count, len(states))
    for index, state in enumerate(states):  # node i sees steps 0 … i-1 and the input
        check("W1 static chain", len(state["facts"]) == index + 1, (index, len(state["facts"])))
    return states


async def _replay(links: Sequence[StaticLink], states: Sequence[ChainState]) -> float:
    """Seconds spent in the run's node calls, replayed on the states they saw."""
    started = perf_counter()
    for link, state in zip(links, states, strict=True):
        await link.node(state)
    return perf_counter() - started


async def _measure(settings: Settings) -> Figures:
    engine, _ = _engine()
    links = [StaticLink(index) for index in range(LINKS)]
    run_peer = _runner(links)
    states = await _record(LINKS)
    cycles = 0
    for _ in range(settings.warmups):
        _check(await engine.run(inputs=[_START]))
        await run_peer()
        await _replay(links, states)
    times: dict[str, list[float]] = {name: [] for name in ("cv", "lg", "lg_user")}
    for _ in range(settings.runs):  # converge, then LangGraph, then LangGraph's replay
        prepare()
        started = perf_counter()
        result = await engine.run(inputs=[_START])
        times["cv"].append(perf_counter() - started)
        cycles = _check(result)
        prepare()
        started = perf_counter()
        await run_peer()
        times["lg"].append(perf_counter() - started)
        prepare()
        times["lg_user"].append(await _replay(links, states))
    return _figures(times, cycles=cycles)


def _figures(times: dict[str, list[float]], *, cycles: int) -> Figures:
    def scaled(name: str, per: int) -> list[float]:
        return [seconds * 1e6 / per for seconds in times[name]]

    framework = [
        t - u for t, u in zip(scaled("lg", SUPERSTEPS), scaled("lg_user", SUPERSTEPS), strict=True)
    ]
    return {
        "links": LINKS,
        "converge_cycles": cycles,
        "langgraph_supersteps": SUPERSTEPS,
        "predicate_calls_per_step": 0,
        "runs": len(times["cv"]),
        "langgraph_framework_us_per_step": rounded(median(framework), 3),
        "langgraph_user_us_per_step": rounded(median(scaled("lg_user", SUPERSTEPS)), 3),
        "rows": [
            row(
                "W1",
                "static edges: µs / cycle or step (whole run)",
                scaled("cv", cycles),
                scaled("lg", SUPERSTEPS),
            ),
            row("W1", "static edges: run ms", scaled("cv", 1000), scaled("lg", 1000)),
        ],
        "method": (
            "LangGraph's graph is a chain of static edges; framework = median over runs of "
            "(run time - replayed node calls) / supersteps; converge's side is its whole W1 cycle"
        ),
    }


def measure(settings: Settings) -> Figures:
    """Run W1 on converge and on LangGraph's static chain, alternating; return the figures."""
    progress(f"W1 static chain on converge and LangGraph: {LINKS} nodes, {settings.runs} runs each")
    return anyio.run(_measure, settings, backend="asyncio")
