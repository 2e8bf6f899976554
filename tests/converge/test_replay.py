"""Replay: recorded effects re-merged without calling suggestors reproduce the root."""

import json
from typing import Literal

import anyio
import pytest
from hitl_formation import build_engine

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    Engine,
    GateDecision,
    ProposedFact,
    ReplayError,
    RunTrace,
    StopReason,
)
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

GATE = "gate:2:strategies/costly"


class Counting:
    """Proposes one new fact per cycle until it has three; counts its calls."""

    name = "counting"
    dependencies = ()

    def __init__(self) -> None:
        self.calls = 0

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < 3

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.calls += 1
        await anyio.sleep(0.001 * (3 - ctx.count(ContextKey.HYPOTHESES)))
        n = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id=f"h{n}", content=f"n={n}", provenance="c"),
            tokens=3,
        )


def engine_with(counting: Counting) -> Engine:
    engine = Engine(record_effects=True)
    engine.register_suggestor(SeedSuggestor("s", "x"))
    engine.register_suggestor(counting)
    engine.register_suggestor(ReactOnceSuggestor("r", "y"))
    return engine


async def test_replay_reproduces_the_root_without_calling_suggestors() -> None:
    original = await engine_with(Counting()).run(
        inputs=[ProposedFact(key=ContextKey.SIGNALS, id="i", content="in", provenance="t")]
    )
    fresh = Counting()
    replayed = await engine_with(fresh).replay(original.trace)
    assert fresh.calls == 0
    assert replayed.integrity == original.integrity
    assert replayed.stop_reason is original.stop_reason
    assert replayed.tokens == original.tokens
    assert [f.model_dump() for f in replayed.context.facts()] == [
        f.model_dump() for f in original.context.facts()
    ]


async def test_replay_works_from_the_trace_json() -> None:
    original = await engine_with(Counting()).run()
    trace = RunTrace.model_validate_json(original.trace.model_dump_json())
    replayed = await engine_with(Counting()).replay(trace)
    assert replayed.integrity.merkle_root == original.integrity.merkle_root


async def test_replay_of_a_paused_then_resumed_run() -> None:
    engine = build_engine(record_effects=True)
    paused = await engine.run()
    assert paused.checkpoint is not None
    resumed = await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    replayed = await build_engine(record_effects=True).replay(resumed.trace)
    assert replayed.integrity == resumed.integrity
    assert replayed.converged


async def test_replay_of_a_paused_run_pauses_again() -> None:
    paused = await build_engine(record_effects=True).run()
    replayed = await build_engine(record_effects=True).replay(paused.trace)
    assert replayed.stop_reason is StopReason.AWAITING_HUMAN
    assert replayed.integrity == paused.integrity
    assert replayed.pending == paused.pending


async def test_replay_of_an_edited_effect_is_refused() -> None:
    original = await engine_with(Counting()).run()
    data = json.loads(original.trace.model_dump_json())
    data["cycles"][0]["executions"][1]["effect"]["proposals"][0]["content"] = "edited"
    edited = RunTrace.model_validate_json(json.dumps(data))
    with pytest.raises(ReplayError, match="not the recorded"):
        await engine_with(Counting()).replay(edited)


async def test_replay_without_recorded_effects_is_refused() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("s", "x"))
    original = await engine.run()
    with pytest.raises(ReplayError, match="record the run with Engine\\(record_effects=True\\)"):
        await engine.replay(original.trace)


async def test_replay_with_other_registrations_is_refused() -> None:
    original = await engine_with(Counting()).run()
    other = Engine(record_effects=True)
    other.register_suggestor(SeedSuggestor("other", "x"))
    with pytest.raises(ReplayError, match="which this engine does not have"):
        await other.replay(original.trace)


async def test_replay_from_another_starting_context_is_refused() -> None:
    original = await engine_with(Counting()).run()
    with pytest.raises(ReplayError, match="starts from root"):
        await engine_with(Counting()).replay(original.trace, original.context)


async def test_replay_keeps_a_budget_stop_reason() -> None:
    limited = Engine(record_effects=True, budget=Budget(max_cycles=2))
    limited.register_suggestor(Counting())
    original = await limited.run()
    assert original.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    replayed = await limited.replay(original.trace)
    assert replayed.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert replayed.integrity == original.integrity


class Quick:
    """Proposes one fact in the first cycle, reporting tokens."""

    name = "quick"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.SEEDS, id="q", content="quick", provenance="q"), tokens=4
        )


class Slow(Quick):
    name = "slow"

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(30)
        return AgentEffect.empty()


class Failing(Quick):
    name = "failing"

    async def execute(self, ctx: Context, /) -> AgentEffect:
        error = RuntimeError("model said no")
        error.tokens = 9  # pyright: ignore[reportAttributeAccessIssue]
        raise error


async def test_replay_of_a_run_cancelled_by_its_time_budget() -> None:
    engine = Engine(record_effects=True, budget=Budget(max_seconds=0.1))
    engine.register_suggestor(Quick())
    engine.register_suggestor(Slow())
    with anyio.fail_after(5):
        original = await engine.run()
    assert original.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert not original.trace.cycles[-1].merged
    assert len(original.context) == 0
    replayed = await engine.replay(original.trace)
    assert replayed.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert replayed.integrity == original.integrity
    assert replayed.tokens == original.tokens == 4


async def test_replay_counts_the_tokens_of_failed_executions() -> None:
    engine = Engine(record_effects=True)
    engine.register_suggestor(Quick())
    engine.register_suggestor(Failing())
    original = await engine.run()
    assert original.tokens == 13
    replayed = await engine.replay(original.trace)
    assert replayed.tokens == 13


async def test_replay_keeps_a_budget_stop_in_a_cycle_that_also_held_proposals() -> None:
    from converge import HitlPolicy

    class Gated(Quick):
        name = "gated"

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposals(
                [
                    ProposedFact(key=ContextKey.SEEDS, id="a", content="a", provenance="g"),
                    ProposedFact(
                        key=ContextKey.SEEDS, id="b", content="b", provenance="g", confidence=0.1
                    ),
                ],
                tokens=50,
            )

    engine = Engine(
        record_effects=True,
        budget=Budget(max_tokens=10),
        hitl=HitlPolicy(confidence_below=0.5),
    )
    engine.register_suggestor(Gated())
    original = await engine.run()
    assert original.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    replayed = await engine.replay(original.trace)
    assert replayed.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert replayed.integrity == original.integrity


class _Clash:
    """Proposes `hypotheses/x` with its own content once, then one fact a cycle up to three."""

    dependencies = ()

    def __init__(self, name: str) -> None:
        self.name = name

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < 3

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(ContextKey.HYPOTHESES)
        ident = "x" if n == 0 else f"{self.name}{n}"
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id=ident, content=self.name, provenance="c")
        )


def clashing(on_conflict: Literal["stop", "reject"]) -> Engine:
    engine = Engine(record_effects=True, on_conflict=on_conflict)
    engine.register_suggestor(_Clash("a"))
    engine.register_suggestor(_Clash("b"))
    return engine


async def test_a_replay_that_stops_before_the_trace_ends_is_refused() -> None:
    """The trace went on past a conflict its engine rejected; an engine that stops on one
    stops there, with recorded cycles left: never a replay that succeeded."""
    original = await clashing("reject").run()
    assert len(original.trace.cycles) > 1
    unrooted = original.trace.model_copy(update={"final_root": None})
    with pytest.raises(ReplayError, match="stopped at cycle 1, but its trace records cycle 2"):
        await clashing("stop").replay(unrooted)
