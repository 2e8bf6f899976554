"""A call that returned an effect has its `Execution` built when first read: the record must
say what happened at the call, not at the read, and be one object however it is reached."""

from __future__ import annotations

import gc
import time
import weakref

import anyio
import pytest

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    Engine,
    PromotionPolicy,
    ProposedFact,
    SuggestorId,
)
from converge._kernel._calls import Recorder, Slot, failure, records
from converge._kernel._registry import Registration

H = ContextKey.HYPOTHESES
SEED = ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="test")


class Slow:
    """Sleeps `delay` seconds once, then proposes one hypothesis with tokens and metadata."""

    name = "slow"
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(self.delay)
        proposal = ProposedFact(key=H, id="h", content="x", provenance="slow")
        return AgentEffect(proposals=(proposal,), tokens=5, metadata={"model": "m"})


def registration(index: int, name: str) -> Registration:
    return Registration(SuggestorId(index), Slow(0.0), name, (), None, None)


@pytest.mark.parametrize("record_effects", [False, True])
def test_a_record_read_late_keeps_the_calls_own_time_and_fields(record_effects: bool) -> None:
    engine = Engine(record_effects=record_effects)
    engine.register_suggestor(Slow(0.05))
    result = engine.run_sync(inputs=[SEED])
    time.sleep(0.3)  # the record is built now, on this first read of the trace
    [call] = [e for cycle in result.trace.cycles for e in cycle.executions]
    assert (call.suggestor, call.outcome, call.proposals, call.tokens) == ("slow", "ok", 1, 5)
    assert call.metadata == {"model": "m"}
    assert 45.0 <= call.duration_ms < 250.0  # the call's 50 ms, not the 300 ms that followed
    assert (call.effect is not None) is record_effects
    if call.effect is not None:
        assert call.effect.proposals[0].id == "h"


def test_every_read_of_a_record_is_the_same_object() -> None:
    engine = Engine()
    engine.register_suggestor(Slow(0.0))
    result = engine.run_sync(inputs=[SEED])
    [first] = [call for cycle in result.trace.cycles for call in cycle.executions]
    [again] = [call for cycle in result.trace.cycles for call in cycle.executions]
    assert again is first
    assert first.outcome == "ok"


def test_a_slots_record_is_built_once_and_kept() -> None:
    slot = Slot(registration(0, "a"))
    assert slot.execution is None  # still running (or cancelled): no record
    effect = AgentEffect.with_proposal(ProposedFact(key=H, id="a", content="x", provenance="a"))
    slot.succeeded(effect, 10.0, 10.25, recorder=None)
    execution = slot.execution
    assert execution is not None
    assert execution is slot.execution
    assert (execution.duration_ms, execution.proposals, execution.effect) == (250.0, 1, None)


def test_records_keep_the_order_and_build_what_a_returned_call_left() -> None:
    refused = failure(registration(1, "b"), "failed", 0.0, ValueError("no"), phase="accepts")
    ran = Slot(registration(0, "a"))
    effect = AgentEffect.with_proposal(ProposedFact(key=H, id="a", content="x", provenance="a"))
    ran.succeeded(effect, 1.0, 1.5, recorder=Recorder(PromotionPolicy()))
    assert ran.returned is not None
    reg, duration, proposals, *_ = ran.returned  # typed by position
    assert (reg.name, duration, proposals) == ("a", 500.0, 1)
    built = records([ran.returned, refused])
    assert [call.suggestor for call in built] == ["a", "b"]
    assert (built[0].outcome, built[0].phase, built[0].attempt) == ("ok", "execute", 1)
    assert (built[0].duration_ms, built[0].proposals, built[0].effect) == (500.0, 1, effect)
    assert built[1] is refused  # a record already built is kept as it is
    assert records(built) == built
    assert records(built)[0] is built[0]
    assert records([]) == ()


def test_a_cycles_log_does_not_keep_the_effects_alive() -> None:
    """Unless effects are recorded, a run's unread trace holds no effect and no proposal."""

    class Once:
        name = "once"
        dependencies = (ContextKey.SEEDS,)

        def __init__(self) -> None:
            self.made: list[weakref.ref[AgentEffect]] = []

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.count(H) == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            proposal = ProposedFact(key=H, id="o", content="x", provenance="once")
            effect = AgentEffect.with_proposal(proposal)
            self.made.append(weakref.ref(effect))
            return effect

    for record, kept in ((False, False), (True, True)):
        engine = Engine(record_effects=record)
        once = Once()
        engine.register_suggestor(once)
        result = engine.run_sync(inputs=[SEED])
        gc.collect()
        [made] = once.made
        assert (made() is not None) is kept
        [call] = [e for cycle in result.trace.cycles for e in cycle.executions]
        assert (call.proposals, call.effect is not None) == (1, record)


class Rewriter:
    """Returns an effect in its first call, then rewrites that effect below the API (its
    tokens to a str, its proposals and metadata) in its second, and proposes nothing."""

    name = "rewriter"
    dependencies = (ContextKey.SEEDS, H)

    def __init__(self) -> None:
        self.kept: AgentEffect | None = None

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) < 2

    async def execute(self, ctx: Context, /) -> AgentEffect:
        if self.kept is None:
            proposal = ProposedFact(key=H, id="r", content="x", provenance="rewriter")
            self.kept = AgentEffect(proposals=(proposal,), tokens=4, metadata={"model": "m"})
            return self.kept
        object.__setattr__(self.kept, "tokens", "lots")
        object.__setattr__(self.kept, "proposals", ())
        object.__setattr__(self.kept, "metadata", {"model": "forged"})
        return AgentEffect()


def test_an_effect_rewritten_after_its_call_leaves_the_calls_record_as_it_was() -> None:
    engine = Engine(budget=Budget(max_cycles=4))
    engine.register_suggestor(Rewriter())
    result = engine.run_sync(inputs=[SEED])
    first = next(e for cycle in result.trace.cycles for e in cycle.executions)
    assert (first.proposals, first.tokens, first.metadata) == (1, 4, {"model": "m"})
    assert result.tokens == 4
    assert result.trace.model_dump_json()  # every record still serialises
