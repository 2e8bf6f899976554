"""What a call leaves in the trace beyond its outcome: the suggestor's metadata, and tokens a
failed call could not count."""

from __future__ import annotations

import anyio
import pytest
from pydantic import JsonValue, ValidationError

from converge import AgentEffect, Context, ContextKey, Engine, ProposedFact, Refusal, RunTrace

SEED = ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="test")


class Noted:
    name = "noted"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        proposal = ProposedFact(key=ContextKey.HYPOTHESES, id="h", content="x", provenance="n")
        metadata: JsonValue = {"model": "smollm2", "options": {"max_tokens": 128, "seed": 7}}
        return AgentEffect(proposals=(proposal,), tokens=3, metadata=metadata)


class CallTimedOut(Exception):
    """As a model provider raises it: it cannot say what the call spent."""

    tokens = None
    metadata = {"model": "smollm2", "attempts": 2}  # noqa: RUF012


class Lost:
    name = "lost"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise CallTimedOut("no reply within 30 s")


def run() -> RunTrace:
    engine = Engine()
    engine.register_suggestor(Noted())
    engine.register_suggestor(Lost())
    return engine.run_sync(inputs=[SEED]).trace


def test_an_effects_metadata_is_recorded_with_its_call_and_survives_json() -> None:
    trace = run()
    noted, lost = trace.cycles[0].executions
    assert noted.metadata == {"model": "smollm2", "options": {"max_tokens": 128, "seed": 7}}
    assert not noted.tokens_unknown
    assert (lost.outcome, lost.tokens, lost.tokens_unknown) == ("failed", 0, True)
    assert lost.metadata == {"model": "smollm2", "attempts": 2}
    again = RunTrace.model_validate_json(trace.model_dump_json())
    assert again.cycles[0].executions == trace.cycles[0].executions


def test_calls_without_metadata_keep_their_json_as_before() -> None:
    engine = Engine()
    engine.register_suggestor(Noted())
    text = engine.run_sync(inputs=[SEED]).trace.cycles[0].executions[0].model_dump_json()
    assert '"metadata"' in text
    plain = AgentEffect(proposals=(), tokens=0)
    assert "metadata" not in plain.model_dump_json()
    assert "tokens_unknown" not in text


def test_metadata_must_be_a_json_object() -> None:
    with pytest.raises(ValidationError, match="metadata must be a JSON object, got list"):
        AgentEffect(metadata=[1, 2])
    with pytest.raises(ValidationError):
        AgentEffect(metadata={"when": object()})  # pyright: ignore[reportArgumentType]
    frozen = AgentEffect(metadata={"a": [1]}).metadata
    assert isinstance(frozen, dict)
    with pytest.raises(TypeError):
        frozen["a"] = 2


class Picky:
    """Proposes one item and refuses another, as an LLM suggestor does with a bad reply item."""

    name = "picky"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        good = ProposedFact(key=ContextKey.HYPOTHESES, id="good", content="ok", provenance="p")
        bad = ProposedFact(key=ContextKey.HYPOTHESES, id="bad", content='{"id": 1}', provenance="p")
        return AgentEffect(
            proposals=(good,), refused=(Refusal(proposal=bad, reason="no confidence"),)
        )


def test_a_refused_item_is_a_rejection_of_its_cycle_and_replays() -> None:
    engine = Engine(record_effects=True)
    engine.register_suggestor(Picky())
    result = engine.run_sync(inputs=[SEED])
    assert result.context.find(ContextKey.HYPOTHESES, "good") is not None
    assert result.context.find(ContextKey.HYPOTHESES, "bad") is None
    [rejection] = result.rejections
    assert (rejection.suggestor, rejection.cycle, rejection.proposal.id) == ("picky", 1, "bad")
    assert rejection.reason == "refused by picky: no confidence"
    assert result.trace.cycles[0].rejected == (rejection,)
    replayer = Engine()
    replayer.register_suggestor(Picky())
    replayed = anyio.run(replayer.replay, result.trace)
    assert replayed.rejections == result.rejections
    with pytest.raises(ValidationError):
        Refusal(proposal=good_proposal(), reason="")


def good_proposal() -> ProposedFact:
    return ProposedFact(key=ContextKey.HYPOTHESES, id="x", content="x", provenance="p")


class PartlyCounted(Exception):
    """As a suggestor raises it after some model calls it could count and one it could not."""

    tokens = 40
    tokens_unknown = True


class Partial:
    name = "partial"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise PartlyCounted("the second call timed out")


def test_a_partly_counted_failure_counts_its_known_tokens_as_a_lower_bound() -> None:
    engine = Engine()
    engine.register_suggestor(Partial())
    result = engine.run_sync(inputs=[SEED])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("failed", 40, True)
    assert result.tokens == 40


class Unmetered:
    """Returns an effect whose tokens are only what a model reported (it left some out)."""

    name = "unmetered"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        proposal = ProposedFact(key=ContextKey.HYPOTHESES, id="u", content="x", provenance="u")
        return AgentEffect(proposals=(proposal,), tokens=40, tokens_unknown=True)


@pytest.mark.parametrize("record_effects", [False, True])
def test_an_effects_unknown_tokens_mark_its_call_and_survive_json(record_effects: bool) -> None:
    engine = Engine(record_effects=record_effects)
    engine.register_suggestor(Unmetered())
    result = engine.run_sync(inputs=[SEED])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("ok", 40, True)
    assert result.tokens == 40
    again = RunTrace.model_validate_json(result.trace.model_dump_json())
    assert again.cycles[0].executions[0].tokens_unknown


def test_an_effect_with_known_tokens_leaves_the_flag_out_of_json() -> None:
    effect = AgentEffect(tokens=3)
    assert not effect.tokens_unknown
    assert "tokens_unknown" not in effect.model_dump_json()
    assert '"tokens_unknown":true' in AgentEffect(tokens_unknown=True).model_dump_json()
