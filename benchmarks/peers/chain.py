"""W1 chain on LangGraph, alternated run by run with converge's W1 (`benchmarks/chain.py`).

The graph has 200 nodes `link-0` … `link-199` over one channel, `facts`, a dict merged by a
reducer. Every node, and `START`, has the same conditional edge: a routing function that
consults all 200 links' predicates (the twin of converge's `accepts`: the previous step
exists and this link's step does not) and routes to the eligible ones, or to `END` when
none is. So each superstep makes 200 predicate calls, runs one node and adds one fact:
201 routing calls and 201 supersteps (the input's and 200 links'), like converge's 201
cycles. The user code's share is measured by replay, as in `chain.py`: a recording run
keeps the state each routing call saw, then the same routing calls (their 200 predicates
and the list they build) and the same node calls are timed in a tight loop.

This is the shape that mirrors converge, not the one a LangGraph user would write for the
job: that one, a chain of static edges, is `chain_static.py`.
"""

# LangGraph ships no `py.typed`, its signatures hold unknown type arguments (`Command[Unknown]`,
# `CachePolicy[Unknown]`), and without the bench-peers group pyright cannot resolve it at all:
# so the calls into LangGraph here are checked loosely, the rest of the module strictly.
# pyright: reportMissingImports=false, reportMissingTypeStubs=false
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from time import perf_counter
from typing import Annotated, Final, TypedDict, cast, final

import anyio
from langgraph.graph import END, START, StateGraph

from .._common import Figures, Settings, prepare, progress
from ..chain import LINKS, _record, _replay  # pyright: ignore[reportPrivateUsage]
from ..chain import START as _START
from ..chain import build_engine as _engine
from ..chain import check as _check
from ._compare import RECURSION_LIMIT, check, row

__all__ = ["ChainState", "Link", "measure"]

_INPUT: Final = {_START.id: _START.content}


def merge(left: Mapping[str, str], right: Mapping[str, str]) -> dict[str, str]:
    """The `facts` reducer: a node's new entries merged into the channel's."""
    return {**left, **right}


class ChainState(TypedDict):
    """The graph's state: every fact by id, as converge's context holds them under `SEEDS`."""

    facts: Annotated[dict[str, str], merge]


Update = dict[str, dict[str, str]]


@final
class Link:
    """Node `link-{index}`: its predicate, and its async node function."""

    __slots__ = ("_mine", "_wait", "name", "node")

    def __init__(self, index: int) -> None:
        self.name = f"link-{index}"
        self._mine = f"step-{index}"
        self._wait = None if index == 0 else f"step-{index - 1}"
        update: Update = {"facts": {self._mine: f"step {index}"}}

        async def link(state: ChainState) -> Update:
            return update  # built once, up front, as converge's `ChainLink` builds its effect

        self.node = link

    def accepts(self, state: ChainState) -> bool:
        """True when the previous step exists and this link's step does not."""
        facts = state["facts"]
        wait = self._wait
        if wait is not None and wait not in facts:
            return False
        return self._mine not in facts


def _router(
    links: Sequence[Link], record: list[ChainState] | None
) -> Callable[[ChainState], list[str]]:
    def route(state: ChainState) -> list[str]:
        if record is not None:
            record.append(state)
        chosen = [link.name for link in links if link.accepts(state)]
        return chosen or [END]

    return route


def _runner(
    links: Sequence[Link], record: list[ChainState] | None = None
) -> Callable[[], Awaitable[ChainState]]:
    """One compiled graph (compiled here, untimed) and the call that runs it once."""
    builder = StateGraph(ChainState)
    names = [link.name for link in links]
    for link in links:
        builder.add_node(link.name, link.node)
    route = _router(links, record)
    for source in (START, *names):
        builder.add_conditional_edges(source, route, [*names, END])
    graph = builder.compile()

    async def run() -> ChainState:
        result = cast(
            ChainState,
            await graph.ainvoke({"facts": dict(_INPUT)}, {"recursion_limit": RECURSION_LIMIT}),
        )
        facts = result["facts"]
        check("W1", len(facts) == LINKS + 1 and f"step-{LINKS - 1}" in facts, len(facts))
        return result

    return run


async def _replay_peer(links: Sequence[Link], states: Sequence[ChainState]) -> float:
    """Seconds spent in the run's routing calls and node calls, replayed."""
    route = _router(links, None)
    started = perf_counter()
    for state in states:
        route(state)
    for link, state in zip(links, states, strict=False):  # link i runs on state i
        await link.node(state)
    return perf_counter() - started


async def _record_peer(links: Sequence[Link]) -> list[ChainState]:
    states: list[ChainState] = []
    await _runner(links, states)()
    check("W1", len(states) == LINKS + 1, len(states))
    return states


async def _measure(settings: Settings) -> Figures:
    engine, chain_links = _engine()
    steps = await _record()
    links = [Link(index) for index in range(LINKS)]
    run_peer = _runner(links)
    states = await _record_peer(links)
    executed = range(LINKS)
    for _ in range(settings.warmups):
        _check(await engine.run(inputs=[_START]))
        await _replay(chain_links, steps, executed)
        await run_peer()
        await _replay_peer(links, states)
    times: dict[str, list[float]] = {name: [] for name in ("cv", "cv_user", "lg", "lg_user")}
    for _ in range(settings.runs):  # converge, then LangGraph, each with its replay
        prepare()
        started = perf_counter()
        _check(await engine.run(inputs=[_START]))
        times["cv"].append(perf_counter() - started)
        prepare()
        times["cv_user"].append(sum(await _replay(chain_links, steps, executed)))
        prepare()
        started = perf_counter()
        await run_peer()
        times["lg"].append(perf_counter() - started)
        prepare()
        times["lg_user"].append(await _replay_peer(links, states))
    return _figures(times, cycles=len(steps), steps=len(states))


def _figures(times: dict[str, list[float]], *, cycles: int, steps: int) -> Figures:
    def scaled(name: str, per: int) -> list[float]:
        return [seconds * 1e6 / per for seconds in times[name]]

    def framework(total: str, user: str, per: int) -> list[float]:
        return [t - u for t, u in zip(scaled(total, per), scaled(user, per), strict=True)]

    return {
        "links": LINKS,
        "converge_cycles": cycles,
        "langgraph_routing_calls": steps,
        "predicate_calls_per_cycle": LINKS,
        "runs": len(times["cv"]),
        "rows": [
            row(
                "W1",
                "200 predicates: µs / cycle or step (whole run)",
                scaled("cv", cycles),
                scaled("lg", steps),
            ),
            row(
                "W1",
                "200 predicates: framework µs (run - user code)",
                framework("cv", "cv_user", cycles),
                framework("lg", "lg_user", steps),
            ),
            row(
                "W1",
                "200 predicates: user code µs",
                scaled("cv_user", cycles),
                scaled("lg_user", steps),
            ),
            row("W1", "200 predicates: run ms", scaled("cv", 1000), scaled("lg", 1000)),
        ],
        "method": "framework = median over runs of (run time - replayed user calls) / cycles",
    }


def measure(settings: Settings) -> Figures:
    """Run W1 on both engines, alternating, and return the figures."""
    progress(f"W1 chain on converge and LangGraph: {LINKS} nodes, {settings.runs} runs each")
    return anyio.run(_measure, settings, backend="asyncio")
