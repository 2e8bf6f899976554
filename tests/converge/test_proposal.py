"""ProposedFact validation and AgentEffect helpers."""

import math

import pytest
from pydantic import ValidationError

from converge import AgentEffect, ContextKey
from tests.doubles import proposal


def test_proposal_defaults() -> None:
    p = proposal()
    assert p.confidence == 1.0
    assert p.payload is None
    assert p.target is None
    assert p.evidence == ()


@pytest.mark.parametrize("confidence", [-0.01, 1.01, math.nan, math.inf, -math.inf])
def test_proposal_confidence_outside_unit_interval_is_a_validation_error(
    confidence: float,
) -> None:
    with pytest.raises(ValidationError):
        proposal(confidence=confidence)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_proposal_payload_with_non_finite_number_is_a_validation_error(bad: float) -> None:
    with pytest.raises(ValidationError, match=r"payload\.outer\[1\] holds a non-finite number"):
        proposal(payload={"outer": [1, bad]})


def test_proposal_key_accepts_the_key_value_string() -> None:
    assert proposal(key="hypotheses").key is ContextKey.HYPOTHESES


def test_proposal_unknown_key_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        proposal(key="beliefs")


def test_proposal_evidence_accepts_a_list() -> None:
    assert proposal(evidence=["seeds/a"]).evidence == ("seeds/a",)


def test_proposal_unknown_field_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        proposal(digest="00")


def test_proposal_is_frozen() -> None:
    p = proposal()
    with pytest.raises(ValidationError):
        p.content = "other"  # pyright: ignore[reportAttributeAccessIssue]


def test_effect_empty_has_no_proposals() -> None:
    assert AgentEffect.empty().is_empty
    assert AgentEffect.empty().tokens == 0


def test_effect_with_proposals_keeps_order_and_tokens() -> None:
    a, b = proposal(id="a"), proposal(id="b")
    effect = AgentEffect.with_proposals([b, a], tokens=7)
    assert effect.proposals == (b, a)
    assert effect.tokens == 7
    assert not effect.is_empty


def test_effect_affected_keys_are_sorted_in_key_order_without_duplicates() -> None:
    effect = AgentEffect.with_proposals(
        [
            proposal(key=ContextKey.DIAGNOSTIC, id="d"),
            proposal(key=ContextKey.SEEDS, id="s"),
            proposal(key=ContextKey.DIAGNOSTIC, id="e"),
            proposal(key=ContextKey.HYPOTHESES, id="h"),
        ]
    )
    assert effect.affected_keys == (
        ContextKey.SEEDS,
        ContextKey.HYPOTHESES,
        ContextKey.DIAGNOSTIC,
    )


def test_effect_negative_tokens_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        AgentEffect(tokens=-1)


def test_effect_refuses_a_non_proposal() -> None:
    with pytest.raises(ValidationError):
        AgentEffect(proposals=("not a proposal",))  # pyright: ignore[reportArgumentType]


def test_context_key_order_is_the_declared_order() -> None:
    assert [key.value for key in ContextKey] == [
        "seeds",
        "hypotheses",
        "strategies",
        "constraints",
        "signals",
        "competitors",
        "evaluations",
        "proposals",
        "diagnostic",
    ]
