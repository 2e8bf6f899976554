"""LlmSuggestor: what the trace records about each call (`Execution.metadata`, tokens)."""

import hashlib
import json
from typing import Any

import pytest
from chat_server import ChatServer, Reply, completion
from test_llm_repair import analyst, good, reply

from converge import ContextSnapshot, Engine, Execution, RunTrace
from converge_suggestors import (
    ChatResponse,
    LlmOutputError,
    LlmSuggestor,
    OpenAIChatProvider,
    ScriptedChatProvider,
)
from tests.doubles import seed

QUESTION = seed("q", "a question", provenance="input:test")
INSTRUCTIONS = "Propose hypotheses about the seeds."


def digest(text: str) -> dict[str, object]:
    return {"chars": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


async def run_one(suggestor: LlmSuggestor) -> tuple[Execution, RunTrace]:
    engine = Engine()
    engine.register_suggestor(suggestor)
    result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    return execution, result.trace


async def test_the_trace_records_the_model_options_and_usage_of_a_call() -> None:
    provider = ScriptedChatProvider(
        [
            ChatResponse(
                content=reply(good()),
                prompt_tokens=40,
                completion_tokens=9,
                model="tiny-v2",
                finish_reason="stop",
            )
        ]
    )
    subject = analyst(
        provider,
        model="tiny",
        temperature=0.3,
        max_tokens=64,
        top_p=0.9,
        seed=42,
        stop=["<|end|>"],
        system_prompt="You are careful.",
    )
    execution, _ = await run_one(subject)
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("ok", 49, False)
    assert execution.metadata == {
        "model": "tiny",
        "max_tokens": 64,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 42,
        "stop": ["<|end|>"],
        "max_repairs": 2,
        "provider": "scripted",
        "provider_class": "ScriptedChatProvider",
        "endpoint": None,
        "structured_output": None,
        "system_prompt": digest("You are careful."),
        "system_message": digest(subject.system_message),
        "response_model": "tiny-v2",
        "attempts": 1,
        "usage": [{"prompt_tokens": 40, "completion_tokens": 9}],
        "finish_reasons": ["stop"],
        "repairs": [],
        "invalid_items": 0,
    }
    assert "You are careful." not in json.dumps(execution.metadata)  # a digest, not the text


async def test_after_a_repair_both_attempts_are_listed_and_the_tokens_summed() -> None:
    provider = ScriptedChatProvider(
        [
            ChatResponse(content="Sure.", prompt_tokens=100, completion_tokens=5),
            ChatResponse(
                content=reply(good(), {"id": "bad id", "content": "x", "confidence": 0.5}),
                prompt_tokens=130,
                completion_tokens=20,
                finish_reason="length",
            ),
        ]
    )
    execution, _ = await run_one(analyst(provider))
    metadata: Any = execution.metadata
    assert execution.tokens == 255
    assert metadata["model"] == "scripted"  # the provider's default model
    assert metadata["system_prompt"] is None
    assert metadata["attempts"] == 2
    assert metadata["usage"] == [
        {"prompt_tokens": 100, "completion_tokens": 5},
        {"prompt_tokens": 130, "completion_tokens": 20},
    ]
    assert metadata["finish_reasons"] == [None, "length"]
    assert metadata["repairs"] == [
        'not the expected JSON {"proposals": [...]} (no JSON object found)'
    ]
    assert metadata["invalid_items"] == 1
    assert "tokens_known" not in metadata


async def test_an_output_error_after_the_last_repair_carries_the_metadata() -> None:
    provider = ScriptedChatProvider(
        [ChatResponse(content="nope", prompt_tokens=10, completion_tokens=1)] * 2
    )
    execution, _ = await run_one(analyst(provider, max_repairs=1))
    metadata: Any = execution.metadata
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("failed", 22, False)
    assert (metadata["attempts"], len(metadata["repairs"])) == (2, 2)
    assert metadata["usage"] == [{"prompt_tokens": 10, "completion_tokens": 1}] * 2
    assert execution.error is not None
    assert execution.error.startswith("LlmOutputError: analyst: no usable reply after 2")


async def test_the_error_itself_carries_tokens_and_metadata() -> None:
    subject = analyst(ScriptedChatProvider(["nope"]), max_repairs=0, model="tiny")
    with pytest.raises(LlmOutputError) as caught:
        await subject.execute(ContextSnapshot.empty())
    assert caught.value.tokens > 0
    assert (caught.value.metadata["model"], caught.value.metadata["attempts"]) == ("tiny", 1)


async def test_over_http_the_provider_endpoint_and_structured_output_are_recorded(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [completion(reply(good()), prompt=90, completion_tokens=30)]
    async with OpenAIChatProvider(
        chat_server.base_url, "sk-secret", model="smollm2", structured_output="json_object"
    ) as provider:
        execution, _ = await run_one(analyst(provider, seed=3))
    metadata: Any = execution.metadata
    assert (metadata["model"], metadata["response_model"]) == ("smollm2", "test-model")
    assert (metadata["provider"], metadata["provider_class"]) == ("openai", "OpenAIChatProvider")
    assert metadata["endpoint"] == f"{chat_server.base_url}/chat/completions"
    assert metadata["structured_output"] == "json_object"
    assert (metadata["seed"], metadata["max_tokens"]) == (3, 512)
    assert metadata["usage"] == [{"prompt_tokens": 90, "completion_tokens": 30}]
    assert "sk-secret" not in json.dumps(metadata)


async def test_a_timed_out_call_is_failed_with_unknown_tokens_and_the_model(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [Reply(delay=0.6, body="{}")]
    async with OpenAIChatProvider(
        chat_server.base_url, "", model="smollm2", timeout=0.2
    ) as provider:
        execution, trace = await run_one(analyst(provider, max_tokens=128))
    assert execution.outcome == "failed"
    assert (execution.tokens, execution.tokens_unknown) == (0, True)
    assert execution.error is not None
    assert "timed out: no complete reply within 0.2 s" in execution.error
    metadata: Any = execution.metadata
    assert (metadata["model"], metadata["max_tokens"]) == ("smollm2", 128)
    assert (metadata["attempts"], metadata["usage"]) == (1, [None])
    assert metadata["tokens_known"] == 0
    assert metadata["response_model"] is None
    assert '"tokens_unknown":true' in trace.model_dump_json()


async def test_a_dropped_repair_keeps_the_known_tokens_in_the_metadata(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [
        completion("not json", prompt=50, completion_tokens=2),
        Reply(drop=True),
    ]
    async with OpenAIChatProvider(
        chat_server.base_url, "", model="smollm2", max_retries=0
    ) as provider:
        execution, _ = await run_one(analyst(provider))
    metadata: Any = execution.metadata
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("failed", 52, True)
    assert metadata["tokens_known"] == 52
    assert metadata["attempts"] == 2
    assert metadata["usage"] == [{"prompt_tokens": 50, "completion_tokens": 2}, None]


async def test_the_metadata_survives_a_json_round_trip_of_the_trace() -> None:
    provider = ScriptedChatProvider(
        [ChatResponse(content="?", prompt_tokens=3), reply(good("h1"), {"id": "x"})]
    )
    execution, trace = await run_one(analyst(provider, top_p=0.5, stop=["END"]))
    assert execution.metadata
    again = RunTrace.model_validate_json(trace.model_dump_json())
    assert again == trace
    assert again.cycles[0].executions[0].metadata == execution.metadata
