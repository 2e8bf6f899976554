"""ValidationAgent: checks in order with exact messages; staged facts promoted or diagnosed."""

import pytest
from pydantic import ValidationError

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    Engine,
    ProposedFact,
    Suggestor,
    known_keys,
)
from converge_suggestors import ValidationAgent, ValidationConfig

PROPOSALS = ContextKey.PROPOSALS
HYPOTHESES = ContextKey.HYPOTHESES


def staged(ident: str = "p1", /, **overrides: object) -> ProposedFact:
    fields: dict[str, object] = {
        "key": PROPOSALS,
        "target": HYPOTHESES,
        "id": ident,
        "content": "a claim",
        "provenance": "model:x",
        "confidence": 0.9,
    }
    fields.update(overrides)
    return ProposedFact.model_validate(fields)


def test_validation_agent_shape() -> None:
    agent = ValidationAgent()
    assert isinstance(agent, Suggestor)
    assert agent.name == "ValidationAgent"
    assert tuple(agent.dependencies) == (PROPOSALS,)
    assert PROPOSALS not in agent.writes
    assert set(agent.writes) == set(known_keys()) - {PROPOSALS}
    assert set(ContextKey) - {PROPOSALS} <= set(agent.writes)


def test_validation_config_defaults() -> None:
    config = ValidationConfig()
    assert (
        config.min_confidence,
        config.max_content_length,
        config.forbidden_terms,
        config.require_provenance,
    ) == (0.5, 10_000, (), True)


def test_validation_config_refuses_a_blank_forbidden_term() -> None:
    with pytest.raises(ValidationError, match="forbidden_terms"):
        ValidationConfig(forbidden_terms=("ok", " "))


@pytest.mark.parametrize(
    ("overrides", "config", "reason"),
    [
        ({"confidence": 0.3}, ValidationConfig(), "confidence 0.3 below threshold 0.5"),
        (
            {"content": "x" * 11},
            ValidationConfig(max_content_length=10),
            "content length 11 exceeds max 10",
        ),
        ({"content": "  "}, ValidationConfig(), "content is empty"),
        ({"provenance": " "}, ValidationConfig(), "provenance is required but empty"),
        (
            {"content": "Buy CRYPTO now"},
            ValidationConfig(forbidden_terms=("crypto",)),
            "content contains forbidden term 'crypto'",
        ),
    ],
)
def test_validate_proposal_rejects_with_the_exact_message(
    overrides: dict[str, object], config: ValidationConfig, reason: str
) -> None:
    verdict = ValidationAgent(config).validate_proposal(staged(**overrides))
    assert not verdict.accepted
    assert verdict.reason == reason


def test_validate_proposal_first_failing_check_wins() -> None:
    config = ValidationConfig(max_content_length=3, forbidden_terms=("bad",))
    verdict = ValidationAgent(config).validate_proposal(
        staged(confidence=0.1, content="very bad", provenance="")
    )
    assert verdict.reason == "confidence 0.1 below threshold 0.5"


def test_validate_proposal_blank_provenance_passes_when_not_required() -> None:
    config = ValidationConfig(require_provenance=False)
    assert ValidationAgent(config).validate_proposal(staged(provenance="")).accepted


def test_validate_proposal_accepts_a_good_proposal() -> None:
    verdict = ValidationAgent().validate_proposal(staged())
    assert verdict.accepted
    assert verdict.reason is None


def test_validate_proposal_takes_a_staged_fact() -> None:
    result = Engine().run_sync(inputs=[staged(confidence=0.2)])
    fact = result.context.find(PROPOSALS, "p1")
    assert fact is not None
    assert ValidationAgent().validate_proposal(fact).reason == "confidence 0.2 below threshold 0.5"


async def test_pipeline_promotes_passing_and_diagnoses_failing_proposals() -> None:
    engine = Engine()
    engine.register_suggestor(ValidationAgent(ValidationConfig(forbidden_terms=("guaranteed",))))
    inputs = [
        staged("good", payload={"score": 3}, evidence=("seeds/s",)),
        staged("shy", confidence=0.2),
        staged("hype", content="Guaranteed returns"),
    ]
    result = await engine.run(inputs=inputs)
    assert result.converged
    promoted = result.context.find(HYPOTHESES, "good")
    assert promoted is not None
    assert (promoted.content, promoted.payload, promoted.confidence, promoted.provenance) == (
        "a claim",
        {"score": 3},
        0.9,
        "model:x",
    )
    assert promoted.evidence == ("seeds/s", "proposals/good")
    assert promoted.promotion.suggestor == "ValidationAgent"
    assert result.context.find(HYPOTHESES, "shy") is None
    shy = result.context.find(ContextKey.DIAGNOSTIC, "validation:rejected:shy")
    assert shy is not None
    assert shy.content == "Proposal 'shy' rejected: confidence 0.2 below threshold 0.5"
    hype = result.context.find(ContextKey.DIAGNOSTIC, "validation:rejected:hype")
    assert hype is not None
    assert hype.content == "Proposal 'hype' rejected: content contains forbidden term 'guaranteed'"
    assert result.cycles == 2


async def test_validation_agent_is_idempotent_through_the_context() -> None:
    agent = ValidationAgent()
    engine = Engine()
    engine.register_suggestor(agent)
    first = await engine.run(inputs=[staged("a"), staged("b", confidence=0.1)])
    assert not agent.accepts(first.context)
    again = await engine.run(first.context)
    assert again.cycles == 1
    assert again.integrity == first.integrity


async def test_a_suggestor_that_may_only_stage_cannot_write_the_target() -> None:
    class Sneaky:
        name = "sneaky-llm"
        dependencies = ()
        writes = (PROPOSALS,)

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposals(
                [
                    ProposedFact(key=HYPOTHESES, id="direct", content="trust me", provenance="x"),
                    staged("staged", confidence=0.1),
                ]
            )

    engine = Engine()
    engine.register_suggestor(Sneaky())
    engine.register_suggestor(ValidationAgent())
    result = await engine.run()
    assert result.context.find(HYPOTHESES, "direct") is None
    assert result.context.find(HYPOTHESES, "staged") is None
    assert [r.reason for r in result.rejections] == ["not authorised to write hypotheses"]
    assert result.context.find(ContextKey.DIAGNOSTIC, "validation:rejected:staged") is not None
