"""SeedSuggestor and ReactOnceSuggestor."""

from converge import ContextKey, Engine, ProposedFact, Suggestor
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor


def test_seed_satisfies_suggestor() -> None:
    assert isinstance(SeedSuggestor("s", "x"), Suggestor)


def test_seed_name_is_unique_per_fact() -> None:
    assert SeedSuggestor("a", "x").name == "seed:seeds/a"
    assert SeedSuggestor("a", "x", key=ContextKey.SIGNALS).name == "seed:signals/a"


async def test_seed_proposes_its_fact_once_without_dependencies() -> None:
    seed = SeedSuggestor("s1", "hello", key=ContextKey.SIGNALS)
    assert seed.dependencies == ()
    engine = Engine()
    engine.register_suggestor(seed)
    result = await engine.run()
    fact = result.context.find(ContextKey.SIGNALS, "s1")
    assert fact is not None
    assert (fact.content, fact.provenance) == ("hello", "seed:signals/s1")
    assert not seed.accepts(result.context)


async def test_seed_does_not_run_when_its_fact_exists() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    given = ProposedFact(key=ContextKey.SEEDS, id="s1", content="hello", provenance="input")
    result = await engine.run(inputs=[given])
    assert result.trace.cycles[0].eligible == ()
    assert result.cycles == 1


def test_react_depends_on_source_and_is_unique_per_fact() -> None:
    react = ReactOnceSuggestor("h1", "x", source=ContextKey.SIGNALS, target=ContextKey.STRATEGIES)
    assert react.dependencies == (ContextKey.SIGNALS,)
    assert react.name == "react:strategies/h1"
    assert isinstance(react, Suggestor)


async def test_react_waits_for_source_facts() -> None:
    engine = Engine()
    engine.register_suggestor(ReactOnceSuggestor("h1", "x"))
    result = await engine.run()
    assert result.context.find(ContextKey.HYPOTHESES, "h1") is None
    assert result.cycles == 1


async def test_react_cites_the_source_facts_and_runs_once() -> None:
    engine = Engine()
    engine.register_suggestor(ReactOnceSuggestor("h1", "answer"))
    inputs = [
        ProposedFact(key=ContextKey.SEEDS, id=i, content="q", provenance="input") for i in "ab"
    ]
    result = await engine.run(inputs=inputs)
    fact = result.context.find(ContextKey.HYPOTHESES, "h1")
    assert fact is not None
    assert fact.evidence == ("seeds/a", "seeds/b")
    assert result.cycles == 2
