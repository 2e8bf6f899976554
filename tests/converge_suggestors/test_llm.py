"""LlmSuggestor: prompts, staging, tokens, tolerant parsing, typed errors, and convergence."""

import json

from chat_server import ChatServer, completion

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    Engine,
    StopReason,
    Suggestor,
)
from converge_suggestors import (
    ChatRequest,
    ChatResponse,
    LlmSuggestor,
    OpenAIChatProvider,
    ScriptedChatProvider,
    ValidationAgent,
)
from tests.doubles import seed

SEEDS = ContextKey.SEEDS
HYPOTHESES = ContextKey.HYPOTHESES
PROPOSALS = ContextKey.PROPOSALS
QUESTION = seed("q", "a question", provenance="input:test")


def reply(*items: dict[str, object]) -> str:
    return json.dumps({"proposals": list(items)})


def analyst(provider: ScriptedChatProvider | OpenAIChatProvider, **options: object) -> LlmSuggestor:
    return LlmSuggestor(
        "analyst",
        provider,
        dependencies=[SEEDS],
        target=HYPOTHESES,
        instructions="Propose hypotheses about the seeds.",
        **options,  # pyright: ignore[reportArgumentType]
    )


def test_llm_suggestor_shape() -> None:
    suggestor = analyst(ScriptedChatProvider([]))
    assert isinstance(suggestor, Suggestor)
    assert tuple(suggestor.writes) == (PROPOSALS,)
    assert tuple(suggestor.dependencies) == (SEEDS, PROPOSALS)


async def test_llm_suggestor_stages_proposals_with_target_provenance_and_evidence() -> None:
    provider = ScriptedChatProvider(
        [
            ChatResponse(
                content=reply({"id": "h1", "content": "it rains", "confidence": 0.8}),
                prompt_tokens=40,
                completion_tokens=9,
                model="tiny",
            )
        ]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(
        inputs=[
            seed("q1", "a question", provenance="input:test"),
            seed("q2", "another", provenance="input:test"),
        ]
    )
    staged = result.context.find(PROPOSALS, "h1")
    assert staged is not None
    assert staged.target is HYPOTHESES
    assert staged.provenance == "analyst:tiny"
    assert staged.evidence == ("seeds/q1", "seeds/q2")
    assert staged.confidence == 0.8
    assert result.tokens == 49
    [request] = provider.requests
    assert request.messages[0].content.startswith("Propose hypotheses about the seeds.")
    assert "seeds/q1 (input:test): a question" in request.messages[1].content
    assert "seeds/q2 (input:test): another" in request.messages[1].content


async def test_llm_suggestor_runs_once_per_new_input() -> None:
    provider = ScriptedChatProvider(
        [
            reply({"id": "h1", "content": "first", "confidence": 0.9}),
            reply({"id": "h2", "content": "second", "confidence": 0.9}),
        ]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    first = await engine.run(inputs=[seed("q1", "a question", provenance="input:test")])
    assert first.converged
    assert len(provider.requests) == 1
    second = await engine.run(
        first.context, inputs=[seed("q2", "a question", provenance="input:test")]
    )
    assert second.converged
    assert len(provider.requests) == 2
    assert "seeds/q2" in provider.requests[1].messages[1].content
    h2 = second.context.find(PROPOSALS, "h2")
    assert h2 is not None
    assert h2.evidence[0] == "seeds/q2"


async def test_llm_suggestor_tolerates_code_fences_and_prose() -> None:
    fenced = (
        "Sure! Here you go:\n```json\n"
        + reply({"id": "h1", "content": "x", "confidence": 1})
        + "\n```\nHope it helps."
    )
    prose = "Answer: " + reply({"id": "h2", "content": "y", "confidence": 1}) + " (done)"
    for text, ident in ((fenced, "h1"), (prose, "h2")):
        engine = Engine()
        engine.register_suggestor(analyst(ScriptedChatProvider([text])))
        result = await engine.run(inputs=[QUESTION])
        assert result.context.find(PROPOSALS, ident) is not None


async def test_llm_suggestor_bad_output_is_a_recorded_failure() -> None:
    engine = Engine()
    engine.register_suggestor(analyst(ScriptedChatProvider(["I think it will rain."] * 3)))
    result = await engine.run(inputs=[QUESTION])
    assert not result.context.has(PROPOSALS)
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.error == (
        "LlmOutputError: analyst: no usable reply after 3 attempt(s) (1 + 2 repairs); last: "
        'not the expected JSON {"proposals": [...]} (no JSON object found); '
        "reply: 'I think it will rain.'"
    )


async def test_llm_suggestor_missing_field_is_a_recorded_failure() -> None:
    engine = Engine()
    engine.register_suggestor(analyst(ScriptedChatProvider([reply({"id": "h1"})]), max_repairs=0))
    result = await engine.run(inputs=[QUESTION])
    error = result.trace.cycles[0].executions[0].error
    assert error is not None
    assert error.startswith("LlmOutputError: analyst: no usable reply after 1 attempt(s)")
    assert "proposals[0].content: Field required; proposals[0].confidence: Field required" in error


async def test_llm_suggestor_shows_unseen_facts_first_within_the_limit() -> None:
    calls = 0

    def answer(request: ChatRequest) -> str:
        nonlocal calls
        calls += 1
        return reply({"id": f"h{calls}", "content": f"c{calls}", "confidence": 0.9})

    provider = ScriptedChatProvider(answer)
    engine = Engine()
    engine.register_suggestor(analyst(provider, max_context_facts=2))
    result = await engine.run(
        inputs=[seed(f"q{i}", "a question", provenance="input:test") for i in range(5)]
    )
    assert result.converged
    assert len(provider.requests) == 3
    shown = [
        [line.split(" ")[1] for line in r.messages[1].content.splitlines()[1:]]
        for r in provider.requests
    ]
    assert shown == [
        ["seeds/q0", "seeds/q1"],
        ["seeds/q2", "seeds/q3"],
        ["seeds/q4", "seeds/q0"],
    ]


async def test_token_budget_stops_a_run_of_llm_calls() -> None:
    def answer(request: ChatRequest) -> ChatResponse:
        n = len(request.messages[1].content)
        body = reply({"id": f"h{n}", "content": f"x{n}", "confidence": 0.9})
        return ChatResponse(content=body, prompt_tokens=60, completion_tokens=40)

    class Feeder:
        """Adds a new seed whenever something is staged, so the model is asked again."""

        name = "feeder"
        dependencies = (PROPOSALS,)

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(
                seed(f"more{ctx.count(SEEDS)}", "a question", provenance="input:test")
            )

    engine = Engine(budget=Budget(max_tokens=250))
    engine.register_suggestor(analyst(ScriptedChatProvider(answer)))
    engine.register_suggestor(Feeder())
    result = await engine.run(inputs=[QUESTION])
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED
    assert result.detail == "max_tokens (300 > 250)"


async def test_llm_and_validation_pipeline_against_a_real_http_server(
    chat_server: ChatServer,
) -> None:
    """One input; the model proposes two hypotheses; one passes validation, one does not."""
    chat_server.replies.append(
        completion(
            "```json\n"
            + reply(
                {"id": "rain", "content": "It will rain today.", "confidence": 0.8},
                {"id": "snow", "content": "It might snow.", "confidence": 0.2},
            )
            + "\n```",
            prompt=120,
            completion_tokens=30,
        )
    )
    provider = OpenAIChatProvider(chat_server.base_url, "sk-local", model="test-model")
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    engine.register_suggestor(ValidationAgent())
    result = await engine.run(
        inputs=[seed("weather", "What is the weather?", provenance="input:test")]
    )
    assert result.converged
    assert result.tokens == 150
    rain = result.context.find(HYPOTHESES, "rain")
    assert rain is not None
    assert rain.provenance == "analyst:test-model"
    assert rain.evidence == ("seeds/weather", "proposals/rain")
    assert result.context.find(HYPOTHESES, "snow") is None
    snow = result.context.find(ContextKey.DIAGNOSTIC, "validation:rejected:snow")
    assert snow is not None
    assert snow.content == "Proposal 'snow' rejected: confidence 0.2 below threshold 0.5"
    assert result.context.count(PROPOSALS) == 2
    assert len(chat_server.received) == 1
    sent = chat_server.received[0].body
    assert sent["model"] == "test-model"
    assert sent["max_tokens"] == 512
    response_format = sent["response_format"]
    assert isinstance(response_format, dict)
    assert response_format["type"] == "json_schema"


async def test_tokens_of_an_unparseable_reply_still_count() -> None:
    provider = ScriptedChatProvider(
        [ChatResponse(content="no json here", prompt_tokens=70, completion_tokens=5)]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider, max_repairs=0))
    result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.tokens == 75
    assert result.tokens == 75


async def test_a_reply_whose_only_item_is_not_a_valid_proposal_is_an_llm_output_error() -> None:
    text = '{"proposals": [{"id": "h", "content": "x", "confidence": 0.9, "payload": NaN}]}'
    engine = Engine()
    engine.register_suggestor(analyst(ScriptedChatProvider([text]), max_repairs=0))
    result = await engine.run(inputs=[QUESTION])
    error = result.trace.cycles[0].executions[0].error
    assert error is not None
    assert error.startswith("LlmOutputError: analyst: no usable reply after 1 attempt(s)")
    assert "proposals[0].payload" in error


async def test_llm_suggestor_counts_only_its_own_staged_facts_as_seen() -> None:
    first = LlmSuggestor(
        "a",
        ScriptedChatProvider([reply({"id": "h1", "content": "x", "confidence": 0.9})]),
        dependencies=[SEEDS],
        target=HYPOTHESES,
        instructions="i",
    )
    second = LlmSuggestor(
        "a:b",
        ScriptedChatProvider([reply({"id": "h2", "content": "y", "confidence": 0.9})]),
        dependencies=[SEEDS],
        target=HYPOTHESES,
        instructions="i",
    )
    alone = Engine()
    alone.register_suggestor(second)
    earlier = await alone.run(inputs=[QUESTION])
    assert earlier.context.find(PROPOSALS, "h2") is not None
    engine = Engine()
    engine.register_suggestor(second)
    engine.register_suggestor(first)
    result = await engine.run(earlier.context)
    assert result.context.find(PROPOSALS, "h1") is not None
