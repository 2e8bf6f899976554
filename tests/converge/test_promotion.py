"""The engine gate: each rule rejects with its reason, and no rejection stops a run."""

import pytest

from converge import ContextKey, Engine, Fact, PromotionPolicy, StopReason, verify
from tests.doubles import proposal

SEEDS = ContextKey.SEEDS
PROPOSALS = ContextKey.PROPOSALS


CASES = [
    ({"content": "   "}, "content is blank"),
    ({"content": ""}, "content is blank"),
    ({"provenance": "\t"}, "provenance is blank"),
    ({"id": ""}, "id is empty"),
    ({"id": "x" * 257}, "id is 257 characters long, over the limit of 256"),
    ({"id": "two words"}, "id 'two words' contains whitespace or control characters"),
    ({"id": "tab\there"}, "id 'tab\\there' contains whitespace or control characters"),
    ({"id": "bell\x07"}, "id 'bell\\x07' contains whitespace or control characters"),
    ({"id": "nbsp\u00a0x"}, "id 'nbsp\\xa0x' contains whitespace or control characters"),
    ({"content": "é" * 600_000}, "content is 1200000 bytes, over the limit of 1048576"),
    ({"key": PROPOSALS}, "a proposal under proposals needs a target"),
    ({"key": PROPOSALS, "target": PROPOSALS}, "a staged proposal cannot target proposals"),
    ({"target": ContextKey.HYPOTHESES}, "target is only allowed under proposals, not under seeds"),
]


@pytest.mark.parametrize(("overrides", "reason"), CASES)
def test_gate_rejects_with_reason(overrides: dict[str, object], reason: str) -> None:
    bad = proposal(**overrides)
    result = Engine().run_sync(inputs=[bad, proposal(id="good")])
    assert result.converged
    assert result.context.find(SEEDS, "good") is not None
    [rejection] = result.rejections
    assert rejection.reason == reason
    if reason.startswith("content is 1"):  # kept once, its first characters and its size
        content = rejection.proposal.content
        assert content == bad.content[:1024] + f"… [{len(bad.content)} characters, truncated]"
        assert rejection.proposal == bad.model_copy(update={"content": content})
    else:
        assert rejection.proposal == bad
    assert len(result.context) == 1


def test_gate_accepts_an_id_of_exactly_256_characters() -> None:
    result = Engine().run_sync(inputs=[proposal(id="x" * 256)])
    assert result.rejections == ()


def test_gate_accepts_a_staged_proposal_with_a_target() -> None:
    staged = proposal(key=PROPOSALS, target=ContextKey.HYPOTHESES)
    result = Engine().run_sync(inputs=[staged])
    found = result.context.find(PROPOSALS, "ok")
    assert found is not None
    assert found.target is ContextKey.HYPOTHESES


def test_gate_content_limit_follows_the_policy() -> None:
    engine = Engine(policy=PromotionPolicy(max_content_bytes=4))
    result = engine.run_sync(inputs=[proposal(content="12345"), proposal(id="b", content="1234")])
    assert [r.reason for r in result.rejections] == ["content is 5 bytes, over the limit of 4"]


def test_gate_id_limit_follows_the_policy() -> None:
    engine = Engine(policy=PromotionPolicy(max_id_length=3))
    result = engine.run_sync(inputs=[proposal(id="abcd")])
    assert result.rejections[0].reason == "id is 4 characters long, over the limit of 3"


def test_gate_rejections_appear_in_the_cycle_trace() -> None:
    from converge import AgentEffect, Context

    class Bad:
        name = "bad"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(proposal(provenance=""))

    engine = Engine()
    engine.register_suggestor(Bad())
    result = engine.run_sync()
    assert result.stop_reason is StopReason.CONVERGED
    [rejection] = result.trace.cycles[0].rejected
    assert (rejection.suggestor, rejection.cycle, rejection.reason) == (
        "bad",
        1,
        "provenance is blank",
    )
    assert result.rejections == (rejection,)


def test_gate_rejects_an_unvalidated_copy_that_cannot_be_hashed() -> None:
    """`model_copy(update=...)` skips validation; the merge still refuses what it cannot hash."""
    surrogate = proposal(id="a").model_copy(update={"content": "\ud800"})
    not_finite = proposal(id="b").model_copy(update={"payload": {"x": float("nan")}})
    result = Engine().run_sync(inputs=[surrogate, not_finite, proposal(id="c")])
    assert result.converged
    assert [f.id for f in result.context.facts()] == ["c"]
    reasons = [r.reason for r in result.rejections]
    assert reasons[0] == (
        "cannot be hashed as canonical JSON (ValueError: content holds a lone surrogate at "
        "position 0; text must be valid UTF-8)"
    )
    assert reasons[1].startswith("cannot be hashed as canonical JSON (ValueError")
    assert result.context.find(SEEDS, "c") is not None
    assert result.integrity.clock == 1


def test_a_fact_holds_its_fields_alone_whatever_its_proposal_carried_below_the_api() -> None:
    """A proposal's fields are copied at once only when they are the eight and no other: an
    entry written into its `__dict__` below the API never reaches the fact."""
    carrying = proposal(id="a")
    vars(carrying)["smuggled"] = "not a field"
    reordered = proposal(id="b")
    content = vars(reordered).pop("content")
    vars(reordered)["content"] = content  # the same fields, another order
    result = Engine().run_sync(inputs=[carrying, reordered, proposal(id="c")])
    assert result.converged
    names = list(Fact.model_fields)
    for fact in result.context.facts():
        assert sorted(vars(fact)) == sorted(names)
        assert "smuggled" not in dict(fact)
    clean = result.context.find(SEEDS, "c")
    assert clean is not None
    assert list(vars(clean)) == names  # in the fact's own order
    assert verify(result.context, result.integrity)
