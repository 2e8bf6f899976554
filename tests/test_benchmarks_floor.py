"""`benchmarks/floor.py`: each floor does exactly the work of the run it is the floor of."""

from collections.abc import Callable, Sequence

import anyio
import pytest

from benchmarks import chain, growth
from benchmarks.floor import cycle_floor, promotion_floor, seal_floor
from converge import AgentEffect, Budget, Context, ContextKey, Engine, ProposedFact

Floor = Callable[[Sequence[ProposedFact], Sequence[str], int], tuple[float, str]]
FLOORS = [pytest.param(seal_floor, id="seal"), pytest.param(promotion_floor, id="promotion")]


def _w3() -> tuple[growth.Grower, str]:
    engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))
    grower = growth.Grower()
    engine.register_suggestor(grower)
    result = anyio.run(engine.run)
    growth.check(result)
    return grower, result.context.merkle_root()


@pytest.mark.parametrize("floor", FLOORS)
def test_the_floor_promotes_exactly_what_a_w3_run_promotes(floor: Floor) -> None:
    grower, root = _w3()
    proposals = grower.proposals
    seconds, floor_root = floor(proposals, [grower.name] * len(proposals), growth.PER_CYCLE)
    assert seconds > 0.0
    assert floor_root == root


@pytest.mark.parametrize("floor", FLOORS)
def test_each_proposal_needs_its_suggestor(floor: Floor) -> None:
    with pytest.raises(ValueError, match="2 proposals but 1 suggestors"):
        floor(growth.Grower().proposals[:2], ["grower"], 100)


def test_the_promotion_floor_checks_identity_within_a_cycle_and_across_cycles() -> None:
    first = growth.Grower().proposals[0]
    for per_cycle in (2, 1):  # the same slot twice in one cycle, then in two
        with pytest.raises(RuntimeError, match="hypotheses/g-0 is promoted already"):
            promotion_floor([first, first], ["grower", "grower"], per_cycle)
    seconds, _ = seal_floor([first, first], ["grower", "grower"], 2)  # the seal alone does not
    assert seconds > 0.0


def test_the_promotion_floor_admits_and_checks_what_the_gate_does() -> None:
    unsure = ProposedFact.model_construct(  # around validation: admission validates it again
        key=ContextKey.HYPOTHESES, id="g-0", content="c", provenance="grower", confidence=2.0
    )
    with pytest.raises(RuntimeError, match="does not validate: invalid proposal: confidence"):
        promotion_floor([unsure], ["grower"], 1)
    blank = ProposedFact(key=ContextKey.HYPOTHESES, id="g-0", content="  ", provenance="grower")
    with pytest.raises(RuntimeError, match="gate refuses the floor's proposal: content is blank"):
        promotion_floor([blank], ["grower"], 1)
    reserved = ProposedFact(
        key=ContextKey.DIAGNOSTIC, id="hitl-rejected:x", content="c", provenance="grower"
    )
    with pytest.raises(RuntimeError, match=r"gate refuses the floor's proposal: .*reserved"):
        promotion_floor([reserved], ["grower"], 1)


def test_the_cycle_floor_runs_the_cycles_of_a_w1_run_to_its_root() -> None:
    engine, links = chain.build_engine()
    result = anyio.run(lambda: engine.run(inputs=[chain.START]))
    chain.check(result)
    seconds, cycles, root = anyio.run(cycle_floor, links, [chain.START])
    assert seconds > 0.0
    assert cycles == result.cycles == chain.LINKS + 1
    assert root == result.integrity.merkle_root


class _Vague:
    """Answers `accepts` with something other than a bool."""

    @property
    def name(self) -> str:
        return "vague"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        return ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.SEEDS)  # pyright: ignore[reportReturnType]

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


def test_the_cycle_floor_refuses_a_verdict_that_is_not_a_bool() -> None:
    with pytest.raises(TypeError, match="accepts\\(\\) of 'vague' returned 1"):
        anyio.run(cycle_floor, [_Vague()], [chain.START])


def test_a_grower_that_makes_its_proposals_in_execute_promotes_the_same_facts() -> None:
    roots: list[str] = []
    for fresh in (False, True):
        engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))
        engine.register_suggestor(growth.Grower(fresh=fresh))
        result = anyio.run(engine.run)
        growth.check(result)
        roots.append(result.context.merkle_root())
    assert roots[0] == roots[1]
    assert growth.Grower(fresh=True).proposals == growth.Grower().proposals
