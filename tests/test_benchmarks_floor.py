"""`benchmarks/floor.py` and W3's growers: the floor seals what a run promotes, all of it."""

import anyio
import pytest

from benchmarks import growth
from benchmarks.floor import seal_floor
from converge import Budget, Engine


def test_the_floor_seals_exactly_what_a_w3_run_promotes() -> None:
    engine = Engine(budget=Budget(max_cycles=1000, max_facts=20_000))
    grower = growth.Grower()
    engine.register_suggestor(grower)
    result = anyio.run(engine.run)
    growth.check(result)
    proposals = grower.proposals
    seconds, root = seal_floor(proposals, [grower.name] * len(proposals), growth.PER_CYCLE)
    assert seconds > 0.0
    assert root == result.context.merkle_root()


def test_each_proposal_needs_its_suggestor() -> None:
    with pytest.raises(ValueError, match="2 proposals but 1 suggestors"):
        seal_floor(growth.Grower().proposals[:2], ["grower"], 100)


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
