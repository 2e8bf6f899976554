"""The one cycle (`RunLoop._cycles` and `_merged`), driven by a scripted `EffectSource`
instead of suggestors."""

from collections.abc import Sequence
from datetime import UTC, datetime

import anyio

from converge import (
    AgentEffect,
    AnyKey,
    Budget,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    GateDecision,
    GateRequest,
    HitlPolicy,
    PromotionPolicy,
    StopReason,
)
from converge._core._trace import Execution
from converge._kernel._config import RunConfig
from converge._kernel._registry import Registration, Registry
from converge._kernel._run import RunLoop
from converge._kernel._source import Batch, End
from converge._kernel._state import RunState
from converge_suggestors import SeedSuggestor
from tests.doubles import fact

H = ContextKey.SEEDS  # what the registered SeedSuggestor may write


class Script:
    """An `EffectSource` that plays fixed batches, then ends at a fixed point."""

    def __init__(
        self,
        batches: Sequence[Batch],
        *,
        stop_after: int | None = None,
        decide: bool = False,
    ) -> None:
        self.batches = list(batches)
        self.produced = 0
        self.stop_after = stop_after
        self.decide = decide

    def end(self, cycle: int, /) -> End | None:
        if self.produced < len(self.batches):
            return None
        return End(None, "", cycle - 1)

    async def produce(
        self, cycle: int, dirty: frozenset[AnyKey], snapshot: ContextSnapshot, /
    ) -> Batch:
        self.produced += 1
        return self.batches[self.produced - 1]

    def budget_stop(self, facts: int, tokens: int, /) -> tuple[StopReason, str] | None:
        if self.stop_after is not None and self.produced >= self.stop_after:
            return StopReason.TOKEN_BUDGET_EXHAUSTED, f"scripted ({tokens} tokens)"
        return None

    def decisions(self, held: Sequence[GateRequest], /) -> list[GateDecision] | None:
        if not self.decide:
            return None
        return [GateDecision.approve(request.gate_id, by="script") for request in held]

    def retrying(self, cycle: int, /) -> bool:
        return False


def registration() -> tuple[Registry, Registration]:
    registry = Registry()
    registry.add(SeedSuggestor("s", "x"), None)
    view = registry.view()
    return registry, view.registrations[0]


def ok(reg: Registration, effect: AgentEffect) -> Execution:
    return Execution(suggestor=reg.name, suggestor_id=int(reg.id), outcome="ok", duration_ms=0.0)


def batch(reg: Registration, *ids: str, tokens: int = 0) -> Batch:
    effect = AgentEffect(proposals=tuple(fact(H, ident) for ident in ids), tokens=tokens)
    return Batch((reg,), (ok(reg, effect),), ((reg, effect),), tokens, None, False)


def config(*, hitl: HitlPolicy | None = None) -> RunConfig:
    return RunConfig(
        budget=Budget(),
        policy=PromotionPolicy(),
        on_conflict="stop",
        on_suggestor_error="isolate",
        max_concurrency=None,
        suggestor_timeout=None,
        hitl=hitl,
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        signing_key=None,
    )


def drive(script: Script, *, hitl: HitlPolicy | None = None) -> ConvergeResult:
    registry, _ = registration()
    state = RunState.start(ContextSnapshot.empty(), ())
    loop = RunLoop(config(hitl=hitl), registry.view(), state)
    return anyio.run(loop.start, script)


def test_cycles_merge_each_batch_and_stop_at_the_fixed_point() -> None:
    _, reg = registration()
    result = drive(Script([batch(reg, "a", tokens=3), batch(reg, "b", tokens=4), batch(reg)]))
    assert result.stop_reason is StopReason.CONVERGED
    assert [c.promoted for c in result.trace.cycles] == [
        ("seeds/a",),
        ("seeds/b",),
        (),
    ]
    assert result.tokens == 7
    assert result.cycles == 3


def test_each_cycle_keeps_what_it_promoted_rejected_and_held_as_the_merger_goes_on() -> None:
    _, reg = registration()

    def rejecting(ident: str) -> Batch:  # promotes `ident`, and a blank fact is rejected
        effect = AgentEffect(proposals=(fact(H, ident), fact(H, f"blank-{ident}", " ")))
        return Batch((reg,), (ok(reg, effect),), ((reg, effect),), 0, None, False)

    cycles = [batch(reg, "a"), rejecting("c"), batch(reg, "b"), rejecting("d"), batch(reg)]
    result = drive(Script(cycles))
    assert [c.promoted for c in result.trace.cycles] == [
        ("seeds/a",),
        ("seeds/c",),
        ("seeds/b",),
        ("seeds/d",),
        (),
    ]
    assert [[r.proposal.id for r in c.rejected] for c in result.trace.cycles] == [
        [],
        ["blank-c"],
        [],
        ["blank-d"],
        [],
    ]
    assert [r.reason for r in result.rejections] == ["content is blank"] * 2

    hitl = HitlPolicy(gated_keys=frozenset({H}))
    decided = drive(Script([batch(reg, "a"), batch(reg, "b"), batch(reg)], decide=True), hitl=hitl)
    assert [c.held for c in decided.trace.cycles] == [
        ("gate:1:seeds/a",),
        ("gate:2:seeds/b",),
        (),
    ]
    assert [c.promoted for c in decided.trace.cycles] == [("seeds/a",), ("seeds/b",), ()]


def test_a_budget_stop_wins_over_held_proposals() -> None:
    _, reg = registration()
    hitl = HitlPolicy(gated_keys=frozenset({H}))
    result = drive(Script([batch(reg, "a", tokens=5)], stop_after=1), hitl=hitl)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert result.detail == "scripted (5 tokens)"
    assert result.pending == ()
    assert result.trace.cycles[0].held == ("gate:1:seeds/a",)


def test_held_proposals_pause_unless_the_source_decides_them() -> None:
    _, reg = registration()
    hitl = HitlPolicy(gated_keys=frozenset({H}))
    paused = drive(Script([batch(reg, "a")]), hitl=hitl)
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert paused.checkpoint is not None
    assert [r.gate_id for r in paused.checkpoint.pending] == ["gate:1:seeds/a"]

    decided = drive(Script([batch(reg, "a"), batch(reg)], decide=True), hitl=hitl)
    assert decided.stop_reason is StopReason.CONVERGED
    approved = decided.context.find(H, "a")
    assert approved is not None
    assert approved.promotion.gate == "human"
    assert approved.promotion.approved_by == "script"
    assert decided.trace.cycles[0].promoted == ("seeds/a",)


def test_a_cancelled_batch_is_recorded_unmerged_and_stops_with_its_reason() -> None:
    _, reg = registration()
    effect = AgentEffect(proposals=(fact(H, "late"),), tokens=2)
    cancelled = Batch(
        (reg,),
        (ok(reg, effect),),
        ((reg, effect),),
        2,
        (StopReason.TIME_BUDGET_EXHAUSTED, "t"),
        False,
    )
    result = drive(Script([batch(reg, "a"), cancelled]))
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.context.find(H, "late") is None
    assert [c.merged for c in result.trace.cycles] == [True, False]
    assert result.tokens == 2


def test_an_empty_batch_is_a_fixed_point_recorded_as_its_own_cycle() -> None:
    result = drive(Script([Batch((), (), (), 0, None, False)]))
    assert result.stop_reason is StopReason.CONVERGED
    assert len(result.trace.cycles) == 1
    assert result.trace.cycles[0].eligible == ()
