"""`benchmarks/peers/chain_static.py`: W1 as a LangGraph user would write it, a static chain."""

# LangGraph ships no `py.typed` and is only in the bench-peers group: its graph objects are
# read loosely here, as in `benchmarks/peers/`.
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false
# pyright: reportUnknownArgumentType=false

from __future__ import annotations

from typing import cast

import anyio
import pytest

from benchmarks import peers
from benchmarks._common import Settings

pytestmark = pytest.mark.skipif(
    peers.langgraph_version() is None,
    reason="LangGraph is not installed (the bench-peers group): pip install --group bench-peers",
)

_TINY = Settings(runs=2, warmups=0, quick=True)


def test_the_graph_is_a_chain_of_plain_edges_without_routing() -> None:
    from benchmarks.peers import chain_static

    graph = chain_static.build_graph([chain_static.StaticLink(index) for index in range(3)])
    edges = [(edge.source, edge.target, edge.conditional) for edge in graph.get_graph().edges]
    assert sorted(edges) == sorted(
        [
            ("__start__", "link-0", False),
            ("link-0", "link-1", False),
            ("link-1", "link-2", False),
            ("link-2", "__end__", False),
        ]
    )
    assert not any(graph.builder.branches.values())  # no routing function anywhere


def test_each_link_runs_once_in_order_and_sees_every_step_before_it() -> None:
    from benchmarks.peers import chain_static

    states = anyio.run(chain_static._record, 5, backend="asyncio")  # pyright: ignore[reportPrivateUsage]
    assert [sorted(state["facts"]) for state in states] == [
        ["start"],
        ["start", "step-0"],
        ["start", "step-0", "step-1"],
        ["start", "step-0", "step-1", "step-2"],
        ["start", "step-0", "step-1", "step-2", "step-3"],
    ]


def test_a_link_that_adds_nothing_fails_the_run_loudly() -> None:
    from benchmarks.peers import chain_static

    links = [chain_static.StaticLink(index) for index in range(4)]

    async def adds_nothing(state: object) -> dict[str, dict[str, str]]:
        return {"facts": {}}

    links[2].node = adds_nothing
    run = chain_static._runner(links)  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(
        RuntimeError, match=r"W1 static chain \(LangGraph\) did not run as designed"
    ):
        anyio.run(run, backend="asyncio")


@pytest.mark.slow
def test_the_peer_runner_compares_converge_with_both_shapes_of_langgraph() -> None:
    figures = peers.measure("W1", _TINY)
    rows = cast(list[dict[str, object]], figures["rows"])
    shapes = {str(row["figure"]).split(":")[0] for row in rows}
    assert shapes == {"200 predicates", "static edges"}
    static = cast(dict[str, object], figures["chain_static"])
    assert static["langgraph_supersteps"] == static["converge_cycles"] == 201
    assert static["predicate_calls_per_step"] == 0
    for row in rows:
        assert row["workload"] == "W1"
        for engine in ("converge", "langgraph"):
            value = row[engine]
            assert isinstance(value, float), row
            assert value > 0, row
        ratio = row["ratio"]
        assert isinstance(ratio, float), row
        assert ratio > 0, row
    framework = static["langgraph_framework_us_per_step"]
    user = static["langgraph_user_us_per_step"]
    assert isinstance(framework, float)
    assert isinstance(user, float)
    assert 0 < user < framework  # the nodes only return a prepared update
