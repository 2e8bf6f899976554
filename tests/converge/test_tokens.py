"""Token events: only `Engine.stream` listens, nothing records them, and closing the stream
while a suggestor streams cancels the run."""

from contextlib import aclosing

import anyio

from converge import (
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    FunctionSuggestor,
    ProposedFact,
    TokenStreamed,
    suggestor,
    token_sink,
)

SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="?", provenance="user")
sinks_seen: list[bool] = []
finished: list[str] = []


def typist(name: str, words: tuple[str, ...]) -> FunctionSuggestor:
    @suggestor(name=name, dependencies=[ContextKey.SEEDS], writes=[ContextKey.HYPOTHESES])
    async def run(ctx: Context) -> list[ProposedFact]:
        sink = token_sink()
        sinks_seen.append(sink is not None)
        for word in words:
            if sink is not None:
                await sink(name, 1, 1, word)
            await anyio.lowlevel.checkpoint()
        finished.append(name)
        content = "".join(words)
        return [ProposedFact(key=ContextKey.HYPOTHESES, id=name, content=content, provenance=name)]

    return run


def engine() -> Engine:
    built = Engine(inputs=[SEED], record_effects=True)
    built.register_suggestor(typist("left", ("a", "b", "c")))
    built.register_suggestor(typist("right", ("\u00e9", "\U0001f600")))
    return built


async def test_concurrent_suggestors_tokens_are_told_apart_and_never_recorded() -> None:
    sinks_seen.clear()
    async with aclosing(engine().stream(tokens=True)) as items:
        got = [item async for item in items]
    result = got[-1]
    assert isinstance(result, ConvergeResult)
    tokens = [item for item in got if isinstance(item, TokenStreamed)]
    by = {
        name: "".join(t.text for t in tokens if t.suggestor == name) for name in ("left", "right")
    }
    assert by == {"left": "abc", "right": "\u00e9\U0001f600"}
    assert {(t.run_id, t.cycle) for t in tokens} == {(result.run_id, 1)}
    assert sinks_seen == [True, True]

    sinks_seen.clear()
    plain = await engine().run()
    assert sinks_seen == [False, False]  # no listener: no sink, nothing streamed
    assert plain.integrity == result.integrity
    effects = [[e.effect for e in cycle.executions] for cycle in result.trace.cycles]
    assert all(effect is not None for cycle in effects for effect in cycle)
    assert effects == [[e.effect for e in cycle.executions] for cycle in plain.trace.cycles]


async def test_closing_the_stream_at_a_token_cancels_the_run() -> None:
    finished.clear()
    async with aclosing(engine().stream(buffer=0, tokens=True)) as items:
        async for item in items:
            if isinstance(item, TokenStreamed):
                break
    assert finished == []  # neither suggestor got to the end of its words
    assert token_sink() is None  # the caller's own context never had the sink


async def test_a_run_inside_a_streamed_one_does_not_stream_into_it() -> None:
    sinks_seen.clear()

    @suggestor(name="nesting", dependencies=[ContextKey.SEEDS], writes=[ContextKey.HYPOTHESES])
    async def nesting(ctx: Context) -> list[ProposedFact]:
        inner = await engine().run()  # its typists see no sink
        return [
            ProposedFact(
                key=ContextKey.HYPOTHESES, id="inner", content=inner.run_id, provenance="nesting"
            )
        ]

    outer = Engine(inputs=[SEED])
    outer.register_suggestor(nesting)
    async with aclosing(outer.stream(tokens=True)) as items:
        got = [item async for item in items]
    assert isinstance(got[-1], ConvergeResult)
    assert not any(isinstance(item, TokenStreamed) for item in got)
    assert sinks_seen == [False, False]


async def test_a_stream_that_did_not_ask_for_tokens_gets_none() -> None:
    sinks_seen.clear()
    async with aclosing(engine().stream()) as items:
        got = [item async for item in items]
    assert not any(isinstance(item, TokenStreamed) for item in got)
    assert sinks_seen == [False, False]  # the suggestors were not handed a sink either
    result = got[-1]
    assert isinstance(result, ConvergeResult)
    assert result.converged
