"""Human in the loop: gating, pausing, resuming, rejecting, timeouts."""

from datetime import UTC, datetime, timedelta

import pytest
from hitl_formation import build_engine

from converge import (
    AgentEffect,
    AwaitingHumanError,
    Context,
    ContextKey,
    Engine,
    GateDecision,
    GateRequest,
    HitlPolicy,
    InvalidResumeError,
    ProposedFact,
    StopReason,
    suggestor,
    verify,
)
from converge_suggestors import SeedSuggestor

S = ContextKey.STRATEGIES
GATE = "gate:2:strategies/costly"


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_gated_proposal_pauses_the_run_while_the_rest_merges() -> None:
    result = await build_engine().run()
    assert result.stop_reason is StopReason.AWAITING_HUMAN
    assert result.cycles == 2
    assert result.context.find(S, "cheap") is not None
    assert result.context.find(S, "costly") is None
    [request] = result.pending
    assert request.gate_id == GATE
    assert (request.suggestor, request.suggestor_id, request.cycle) == ("recommender", 1, 2)
    assert request.summary == "Buy the enterprise plan"
    assert request.deadline is None
    assert result.trace.cycles[-1].held == (GATE,)
    assert result.checkpoint is not None
    assert result.checkpoint.pending == result.pending
    assert result.detail == f"1 proposal(s) awaiting a human: {GATE}"
    with pytest.raises(AwaitingHumanError) as caught:
        result.raise_for_status()
    assert caught.value.pending == result.pending


async def test_approval_promotes_with_the_human_gate_and_continues() -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    assert result.converged
    costly = result.context.find(S, "costly")
    assert costly is not None
    assert (costly.promotion.gate, costly.promotion.approved_by) == ("human", "jane")
    assert (costly.promotion.suggestor, costly.promotion.cycle) == ("recommender", 2)
    assert costly.payload == {"spend": 250_000}
    assert result.context.find(ContextKey.EVALUATIONS, "plan-noted") is not None
    clocks = [f.promotion.clock for f in result.context.facts()]
    assert sorted(clocks) == list(range(1, len(clocks) + 1))
    assert result.integrity.clock == len(clocks)
    assert result.tokens == 10
    assert result.cycles == 4
    assert result.run_id == paused.run_id
    assert result.trace.decisions == (GateDecision.approve(GATE, by="jane"),)
    assert [c.cycle for c in result.trace.cycles] == [1, 2, 3, 4]
    assert verify(result.context, result.integrity)


async def test_rejection_leaves_a_diagnostic_and_refuses_reproposal() -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    decision = GateDecision.reject(GATE, by="jane", reason="too expensive")
    result = await engine.resume(paused.checkpoint, [decision])
    assert result.converged
    assert result.context.find(S, "costly") is None
    note = result.context.find(ContextKey.DIAGNOSTIC, "hitl-rejected:costly")
    assert note is not None
    assert note.content == "HITL gate rejected proposal 'costly' by jane: too expensive"
    assert note.promotion.gate == "human"


async def test_rejection_without_a_reason_says_so() -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint, [GateDecision.reject(GATE, by="bo")])
    note = result.context.find(ContextKey.DIAGNOSTIC, "hitl-rejected:costly")
    assert note is not None
    assert note.content == "HITL gate rejected proposal 'costly' by bo: no reason provided"


async def test_a_rejected_proposal_cannot_be_proposed_again_in_the_run() -> None:
    class Insist:
        name = "insist"
        dependencies = (ContextKey.DIAGNOSTIC,)

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(
                ProposedFact(key=S, id="costly", content="Please?", provenance="insist")
            )

    engine = build_engine()
    engine.register_suggestor(Insist())
    paused = await engine.run()
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint, [GateDecision.reject(GATE, by="jane")])
    assert result.context.find(S, "costly") is None
    assert result.rejections[-1].reason == "strategies/costly was rejected by a human in this run"


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ([], r"no decision for gates \['gate:2:strategies/costly'\]"),
        ([GateDecision.approve("gate:9:x/y", by="j")], "has no pending gate 'gate:9:x/y'"),
        (
            [GateDecision.approve(GATE, by="a"), GateDecision.reject(GATE, by="b")],
            "has more than one decision",
        ),
    ],
)
async def test_resume_needs_exactly_one_decision_per_pending_gate(
    decisions: list[GateDecision], message: str
) -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    with pytest.raises(InvalidResumeError, match=message):
        await engine.resume(paused.checkpoint, decisions)
    result = await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    assert result.converged


async def test_expired_gate_gets_on_timeout_reject_by_timeout() -> None:
    clock = FakeClock()
    policy = HitlPolicy(confidence_below=0.5, timeout=timedelta(hours=1))
    engine = build_engine(clock=clock, policy=policy)
    paused = await engine.run()
    [request] = paused.pending
    assert request.deadline == clock.now + timedelta(hours=1)
    clock.now += timedelta(hours=2)
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint)
    note = result.context.find(ContextKey.DIAGNOSTIC, "hitl-rejected:costly")
    assert note is not None
    assert note.content.startswith("HITL gate rejected proposal 'costly' by timeout: deadline")
    assert result.trace.decisions[0].by == "timeout"


async def test_expired_gate_gets_on_timeout_approve() -> None:
    clock = FakeClock()
    policy = HitlPolicy(confidence_below=0.5, timeout=timedelta(minutes=5), on_timeout="approve")
    engine = build_engine(clock=clock, policy=policy)
    paused = await engine.run()
    clock.now += timedelta(minutes=6)
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint)
    costly = result.context.find(S, "costly")
    assert costly is not None
    assert costly.promotion.approved_by == "timeout"


async def test_a_decision_for_an_expired_gate_is_refused() -> None:
    clock = FakeClock()
    policy = HitlPolicy(confidence_below=0.5, timeout=timedelta(seconds=1))
    engine = build_engine(clock=clock, policy=policy)
    paused = await engine.run()
    clock.now += timedelta(seconds=2)
    assert paused.checkpoint is not None
    with pytest.raises(InvalidResumeError, match="expired at"):
        await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])


async def test_inputs_are_never_gated() -> None:
    engine = Engine(hitl=HitlPolicy(gated_keys=frozenset({ContextKey.SEEDS})))
    given = ProposedFact(key=ContextKey.SEEDS, id="s", content="c", provenance="t")
    result = await engine.run(inputs=[given])
    assert result.converged
    assert result.context.find(ContextKey.SEEDS, "s") is not None


async def test_gated_key_and_predicate_gate_proposals() -> None:
    by_key = Engine(hitl=HitlPolicy(gated_keys=frozenset({ContextKey.SEEDS})))
    by_key.register_suggestor(SeedSuggestor("s", "x"))
    assert (await by_key.run()).stop_reason is StopReason.AWAITING_HUMAN

    def predicate(proposal: ProposedFact) -> bool:
        return proposal.content.startswith("risky")

    by_predicate = Engine(hitl=HitlPolicy(predicate=predicate))
    by_predicate.register_suggestor(SeedSuggestor("s", "safe"))
    by_predicate.register_suggestor(SeedSuggestor("r", "risky bet"))
    paused = await by_predicate.run()
    assert [g.proposal.id for g in paused.pending] == ["r"]


async def test_a_predicate_that_raises_gates_the_proposal() -> None:
    def predicate(proposal: ProposedFact) -> bool:
        raise ValueError("cannot tell")

    engine = Engine(hitl=HitlPolicy(predicate=predicate))
    engine.register_suggestor(SeedSuggestor("s", "x"))
    assert (await engine.run()).stop_reason is StopReason.AWAITING_HUMAN


async def test_a_second_proposal_of_a_held_fact_is_dropped() -> None:
    @suggestor(name="again", accepts=lambda ctx: ctx.cycle == 0)
    async def again(ctx: Context) -> list[ProposedFact]:
        return [ProposedFact(key=ContextKey.SEEDS, id="s", content="y", provenance="again")]

    engine = Engine(hitl=HitlPolicy(gated_keys=frozenset({ContextKey.SEEDS})))
    engine.register_suggestor(SeedSuggestor("s", "x"))
    engine.register_suggestor(again)
    result = await engine.run()
    assert len(result.pending) == 1
    assert result.pending[0].proposal.content == "x"
    assert result.rejections[0].reason == "seeds/s is already held for a human decision"


async def test_an_ungated_proposal_for_a_held_fact_is_dropped_too() -> None:
    """The held version stays the only candidate, so approving it cannot silently conflict."""

    @suggestor(name="shy", accepts=lambda ctx: ctx.cycle == 0)
    async def shy(ctx: Context) -> list[ProposedFact]:
        return [ProposedFact(key=S, id="x", content="low", provenance="a", confidence=0.3)]

    @suggestor(name="bold", accepts=lambda ctx: ctx.cycle == 0)
    async def bold(ctx: Context) -> list[ProposedFact]:
        return [ProposedFact(key=S, id="x", content="high", provenance="b", confidence=0.9)]

    engine = Engine(hitl=HitlPolicy(confidence_below=0.5))
    engine.register_suggestor(shy)
    engine.register_suggestor(bold)
    paused = await engine.run()
    assert paused.context.find(S, "x") is None
    assert paused.rejections[0].reason == "strategies/x is already held for a human decision"
    assert paused.checkpoint is not None
    gate = paused.pending[0].gate_id
    result = await engine.resume(paused.checkpoint, [GateDecision.approve(gate, by="jane")])
    approved = result.context.find(S, "x")
    assert approved is not None
    assert approved.content == "low"


# --- the rule that held a proposal -------------------------------------------------------------


def _proposal(key: ContextKey = S, confidence: float = 0.9) -> ProposedFact:
    return ProposedFact(key=key, id="p", content="c", provenance="t", confidence=confidence)


def test_hitl_policy_held_by_names_the_rule_and_the_value_that_held_it() -> None:
    def big(proposal: ProposedFact) -> bool:
        return proposal.id == "p"

    def broken(proposal: ProposedFact) -> bool:
        raise ValueError("no \ud800 idea")

    assert HitlPolicy().held_by(_proposal()) is None
    by_key = HitlPolicy(gated_keys=frozenset({S}), confidence_below=0.5)
    assert by_key.held_by(_proposal(confidence=0.1)) == (
        "its key strategies is in HitlPolicy.gated_keys"
    )
    low = HitlPolicy(confidence_below=0.5)
    assert low.held_by(_proposal(confidence=0.25)) == (
        "its confidence 0.25 is below HitlPolicy.confidence_below 0.5"
    )
    assert low.held_by(_proposal(confidence=0.5)) is None
    said = HitlPolicy(predicate=big).held_by(_proposal())
    assert said is not None
    assert said.endswith("big returned true")
    assert said.startswith("HitlPolicy.predicate ")
    raised = HitlPolicy(predicate=broken).held_by(_proposal())
    assert raised is not None
    assert "raised ValueError: no \\ud800 idea (a predicate that raises holds" in raised
    raised.encode("utf-8")  # storable: the lone surrogate is escaped
    assert HitlPolicy(predicate=broken).gates(_proposal())
    assert not HitlPolicy(predicate=lambda _: False).gates(_proposal())


async def test_a_gate_request_records_the_rule_that_held_its_proposal() -> None:
    result = await build_engine().run()
    [request] = result.pending
    assert request.rule == "its confidence 0.4 is below HitlPolicy.confidence_below 0.5"
    assert result.checkpoint is not None
    assert result.checkpoint.pending[0].rule == request.rule


def test_a_gate_request_without_a_rule_reads_and_writes_the_older_json() -> None:
    """Records saved before the rule was kept load, and keep their bytes (and signatures)."""
    old = {
        "gate_id": "gate:2:strategies/p",
        "proposal": _proposal().model_dump(mode="json"),
        "suggestor": "t",
        "suggestor_id": 1,
        "cycle": 2,
        "summary": "c",
        "deadline": None,
    }
    request = GateRequest.model_validate(old)
    assert request.rule == ""
    assert request.model_dump(mode="json") == old
    held = request.model_copy(update={"rule": "its key strategies is in HitlPolicy.gated_keys"})
    assert held.model_dump(mode="json")["rule"] == held.rule
