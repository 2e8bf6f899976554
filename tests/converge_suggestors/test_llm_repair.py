"""LlmSuggestor: the reply schema, call options, repairs and partly valid replies."""

import json
from typing import Any

from chat_server import ChatServer, completion
from pydantic import BaseModel

from converge import ContextKey, Engine
from converge_suggestors import (
    ChatResponse,
    LlmSuggestor,
    OpenAIChatProvider,
    ProviderError,
    ScriptedChatProvider,
)
from converge_suggestors._llm_format import reply_schema
from tests.doubles import seed

SEEDS = ContextKey.SEEDS
HYPOTHESES = ContextKey.HYPOTHESES
PROPOSALS = ContextKey.PROPOSALS
DIAGNOSTIC = ContextKey.DIAGNOSTIC
QUESTION = seed("q", "a question", provenance="input:test")


def reply(*items: dict[str, object]) -> str:
    return json.dumps({"proposals": list(items)})


def good(ident: str = "h1") -> dict[str, object]:
    return {"id": ident, "content": f"claim {ident}", "confidence": 0.8}


def analyst(provider: object, **options: object) -> LlmSuggestor:
    return LlmSuggestor(
        "analyst",
        provider,  # pyright: ignore[reportArgumentType]
        dependencies=[SEEDS],
        target=HYPOTHESES,
        instructions="Propose hypotheses about the seeds.",
        **options,  # pyright: ignore[reportArgumentType]
    )


class Weather(BaseModel):
    kind: str
    millimetres: float


async def test_every_request_carries_the_reply_schema_and_the_call_options() -> None:
    provider = ScriptedChatProvider([reply(good())])
    engine = Engine()
    engine.register_suggestor(
        analyst(
            provider,
            model="tiny",
            temperature=0.3,
            max_tokens=64,
            top_p=0.9,
            seed=42,
            stop=["<|end|>"],
            system_prompt="You are careful.",
        )
    )
    await engine.run(inputs=[QUESTION])
    [request] = provider.requests
    assert (request.model, request.temperature, request.max_tokens) == ("tiny", 0.3, 64)
    assert (request.top_p, request.seed, request.stop) == (0.9, 42, ("<|end|>",))
    assert request.response_schema is not None
    assert request.response_schema.name == "proposals"
    assert request.response_schema.strict
    assert request.response_schema.json_schema == reply_schema(None)
    system = request.messages[0].content
    assert system.startswith("You are careful.\n\nPropose hypotheses about the seeds.\n\nReply")


def test_max_tokens_is_bounded_by_default_and_options_are_readable() -> None:
    suggestor = analyst(ScriptedChatProvider([]))
    assert suggestor.options == {
        "model": None,
        "max_tokens": 512,
        "temperature": 0.0,
        "top_p": None,
        "seed": None,
        "stop": [],
        "max_repairs": 2,
    }


def test_the_default_format_prompt_describes_fields_without_values_to_copy() -> None:
    system = analyst(ScriptedChatProvider([])).system_message
    assert '"id": an identifier you make up' in system
    assert '"confidence": how likely the proposal is to be right, a number from 0 to 1' in system
    assert "short-id-without-spaces" not in system
    assert "one claim" not in system
    assert "payload" not in system


def test_the_format_prompt_can_be_replaced_or_left_out() -> None:
    custom = analyst(ScriptedChatProvider([]), format_prompt="JSON please.")
    assert custom.system_message == "Propose hypotheses about the seeds.\n\nJSON please."
    bare = analyst(ScriptedChatProvider([]), format_prompt="")
    assert bare.system_message == "Propose hypotheses about the seeds."


def test_a_payload_model_is_in_the_schema_and_the_format_prompt() -> None:
    suggestor = analyst(ScriptedChatProvider([]), payload_model=Weather)
    assert '"payload": structured data about the proposal' in suggestor.system_message
    assert '"millimetres":{"type":"number"}' in suggestor.system_message
    schema: Any = reply_schema(Weather)
    item = schema["properties"]["proposals"]["items"]
    assert item["required"] == ["id", "content", "confidence", "payload"]
    assert item["properties"]["payload"] == {
        "properties": {"kind": {"type": "string"}, "millimetres": {"type": "number"}},
        "required": ["kind", "millimetres"],
        "type": "object",
        "additionalProperties": False,
    }


async def test_payloads_are_validated_against_the_payload_model() -> None:
    text = reply(
        {**good("rain"), "payload": {"kind": "rain", "millimetres": 4}},
        {**good("snow"), "payload": {"kind": "snow"}},
    )
    engine = Engine()
    engine.register_suggestor(analyst(ScriptedChatProvider([text]), payload_model=Weather))
    result = await engine.run(inputs=[QUESTION])
    rain = result.context.find(PROPOSALS, "rain")
    assert rain is not None
    assert rain.payload == {"kind": "rain", "millimetres": 4.0}
    assert result.context.find(PROPOSALS, "snow") is None
    [refused] = result.rejections
    assert "proposals[1].payload.millimetres: Field required" in refused.reason


async def test_a_bad_reply_is_repaired_and_the_tokens_of_every_attempt_count() -> None:
    provider = ScriptedChatProvider(
        [
            ChatResponse(content="Sure, it rains.", prompt_tokens=100, completion_tokens=5),
            ChatResponse(content=reply(good()), prompt_tokens=130, completion_tokens=20),
        ]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "ok"
    assert execution.tokens == 255
    assert result.tokens == 255
    assert result.context.find(PROPOSALS, "h1") is not None
    first, second = provider.requests
    assert second.messages[:2] == first.messages
    assert second.messages[2].role == "assistant"
    assert second.messages[2].content == "Sure, it rains."
    assert second.messages[3].role == "user"
    assert second.messages[3].content == (
        'That reply cannot be used: not the expected JSON {"proposals": [...]} '
        "(no JSON object found). Reply again with the corrected JSON object only, in the "
        "format described."
    )


async def test_a_reply_whose_items_are_all_invalid_is_repaired_with_the_reasons() -> None:
    provider = ScriptedChatProvider(
        [reply({"id": "h 1", "content": "x", "confidence": 2}), reply(good())]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(inputs=[QUESTION])
    assert result.context.find(PROPOSALS, "h1") is not None
    repair = provider.requests[1].messages[-1].content
    assert "proposals[0].id: String should match pattern" in repair
    assert "proposals[0].confidence: Input should be less than or equal to 1" in repair


async def test_repairs_give_up_after_max_repairs_with_every_token_counted() -> None:
    provider = ScriptedChatProvider(
        [ChatResponse(content="nope", prompt_tokens=10, completion_tokens=1)] * 2
        + [ChatResponse(content="[1]", prompt_tokens=10, completion_tokens=1)]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.tokens == 33
    assert len(provider.requests) == 3
    assert execution.error == (
        "LlmOutputError: analyst: no usable reply after 3 attempt(s) (1 + 2 repairs); last: "
        "proposals[0]: Input should be a valid dictionary or instance of LlmProposal; "
        "reply: '[1]'"
    )


async def test_valid_items_are_staged_and_invalid_ones_recorded_with_the_reason() -> None:
    text = reply(
        good("h1"),
        {"id": "h2", "content": "no confidence"},
        {"id": "has space", "content": "x", "confidence": 0.5},
        {"id": "h1", "content": "same id, other content", "confidence": 0.5},
        good("h3"),
    )
    provider = ScriptedChatProvider([ChatResponse(content=text, model="tiny")])
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(inputs=[QUESTION])
    assert len(provider.requests) == 1  # nothing to repair: some items are valid
    assert [fact.id for fact in result.context.get(PROPOSALS)] == ["h1", "h3"]
    assert not result.context.has(DIAGNOSTIC)
    assert [(r.suggestor, r.cycle, r.reason) for r in result.rejections] == [
        (
            "analyst",
            1,
            "refused by analyst: not a valid proposal (proposals[1].confidence: Field required)",
        ),
        (
            "analyst",
            1,
            "refused by analyst: not a valid proposal "
            "(proposals[2].id: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$')",
        ),
        (
            "analyst",
            1,
            "refused by analyst: not a valid proposal "
            "(proposals[3].id: 'h1' is already used in this reply)",
        ),
    ]
    first = result.rejections[0].proposal
    assert first.provenance == "analyst:tiny"
    assert first.content == (
        'proposals[1] of the model\'s reply: {"id": "h2", "content": "no confidence"}'
    )
    assert first.payload == {"index": 1, "item": '{"id": "h2", "content": "no confidence"}'}
    assert [r.reason for r in result.trace.cycles[0].rejected] == [
        r.reason for r in result.rejections
    ]


async def test_an_empty_list_is_a_usable_reply_and_a_bare_list_is_accepted() -> None:
    empty = ScriptedChatProvider(['{"proposals": []}'])
    engine = Engine()
    engine.register_suggestor(analyst(empty))
    result = await engine.run(inputs=[QUESTION])
    assert result.trace.cycles[0].executions[0].outcome == "ok"
    assert len(empty.requests) == 1
    bare = ScriptedChatProvider([json.dumps([good("h9")])])
    engine = Engine()
    engine.register_suggestor(analyst(bare))
    result = await engine.run(inputs=[QUESTION])
    assert result.context.find(PROPOSALS, "h9") is not None


async def test_a_timed_out_repair_makes_the_tokens_unknown_and_keeps_the_known_part() -> None:
    provider = ScriptedChatProvider(
        [
            ChatResponse(content="no", prompt_tokens=50, completion_tokens=2),
            ProviderError("POST http://x/v1/chat/completions timed out", tokens=None),
        ]
    )
    engine = Engine()
    engine.register_suggestor(analyst(provider))
    result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    # the known part counts (a lower bound), and the call is marked as having spent more
    assert (execution.tokens, execution.tokens_unknown) == (52, True)
    assert result.tokens == 52
    metadata: Any = execution.metadata
    assert metadata["tokens_known"] == 52
    assert metadata["usage"] == [{"prompt_tokens": 50, "completion_tokens": 2}, None]
    assert execution.error == (
        "ProviderError: analyst: attempt 2 (a repair) failed: "
        "POST http://x/v1/chat/completions timed out"
    )


async def test_over_http_the_options_and_json_object_schema_are_sent_and_usage_summed(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [
        completion("not json", prompt=90, completion_tokens=3),
        completion(reply(good()), prompt=120, completion_tokens=25),
    ]
    async with OpenAIChatProvider(
        chat_server.base_url, "", model="smollm2", structured_output="json_object"
    ) as provider:
        engine = Engine()
        engine.register_suggestor(analyst(provider, max_tokens=160, seed=3, stop=["\n\n\n"]))
        result = await engine.run(inputs=[QUESTION])
    assert result.tokens == 238
    first, second = (received.body for received in chat_server.received)
    assert first["max_tokens"] == 160
    assert (first["seed"], first["stop"], first["temperature"]) == (3, ["\n\n\n"], 0.0)
    assert first["response_format"] == {"type": "json_object", "schema": reply_schema(None)}
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    staged = result.context.find(PROPOSALS, "h1")
    assert staged is not None
    assert staged.provenance == "analyst:test-model"
