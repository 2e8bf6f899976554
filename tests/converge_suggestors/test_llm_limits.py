"""LlmSuggestor over HTTP against hostile replies: deep JSON, usage with nulls, 10 MB replies."""

import json
from typing import Any

from chat_server import ChatServer, Reply, completion
from pydantic import BaseModel
from test_llm_repair import analyst, good, reply

from converge import Budget, ContextKey, Engine, ProposedFact, StopReason
from converge_suggestors import LlmOutputError, OpenAIChatProvider
from converge_suggestors._llm_format import MAX_REPLY_DEPTH, item_model, parse_reply
from tests.doubles import seed

QUESTION = seed("q", "a question", provenance="input:test")
DEEP = "[" * 200_000 + "]" * 200_000


def provider(server: ChatServer) -> OpenAIChatProvider:
    return OpenAIChatProvider(server.base_url, "sk-limits", model="m", max_retries=0)


async def test_a_reply_nested_200000_deep_is_repaired_with_its_tokens_counted(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [
        completion(DEEP, prompt=30, completion_tokens=500),
        completion(reply(good()), prompt=60, completion_tokens=9),
    ]
    async with provider(chat_server) as model:
        engine = Engine()
        engine.register_suggestor(analyst(model, max_repairs=1))
        result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("ok", 599, False)
    assert result.context.find(ContextKey.PROPOSALS, "h1") is not None
    repair = chat_server.received[1].body["messages"][-1]["content"]
    assert f"its JSON nests deeper than {MAX_REPLY_DEPTH} levels" in repair
    metadata: Any = execution.metadata
    assert metadata["repairs"] == [
        f'not the expected JSON {{"proposals": [...]}} '
        f"(its JSON nests deeper than {MAX_REPLY_DEPTH} levels)"
    ]


async def test_a_deep_reply_left_unrepaired_counts_its_tokens_against_the_budget(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(completion(DEEP, prompt=30, completion_tokens=500))
    async with provider(chat_server) as model:
        engine = Engine(budget=Budget(max_tokens=100))
        engine.register_suggestor(analyst(model, max_repairs=0))
        result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.error is not None
    assert execution.error.startswith("LlmOutputError: analyst: no usable reply after 1 attempt")
    assert "nests deeper than" in execution.error
    assert (execution.tokens, result.tokens) == (530, 530)
    assert result.stop_reason is StopReason.TOKEN_BUDGET_EXHAUSTED


def test_json_nested_just_within_the_limit_is_read_and_deeper_is_not() -> None:
    def nested(depth: int) -> str:  # the reply object is level 1, its list 2, the item 3
        payload = "[" * (depth - 3) + "]" * (depth - 3)
        item = f'{{"id": "a", "content": "c", "confidence": 0.5, "payload": {payload}}}'
        return f'{{"proposals": [{item}]}}'

    def make(item: BaseModel) -> ProposedFact:
        return ProposedFact(key=ContextKey.SEEDS, id="a", content="c", provenance="model")

    within = parse_reply(nested(MAX_REPLY_DEPTH), item_model(None), make)
    assert (within.problem, len(within.proposals)) == (None, 1)
    deeper = parse_reply(nested(MAX_REPLY_DEPTH + 1), item_model(None), make)
    assert deeper.problem == (
        f'not the expected JSON {{"proposals": [...]}} '
        f"(its JSON nests deeper than {MAX_REPLY_DEPTH} levels)"
    )


async def test_a_good_reply_whose_usage_has_nulls_is_staged_with_its_tokens_unknown(
    chat_server: ChatServer,
) -> None:
    payload = {
        "model": "m",
        "choices": [{"message": {"content": reply(good())}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": None, "total_tokens": None},
    }
    chat_server.replies.append(Reply(body=json.dumps(payload)))
    async with provider(chat_server) as model:
        engine = Engine()
        engine.register_suggestor(analyst(model))
        result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("ok", 40, True)
    assert result.context.find(ContextKey.PROPOSALS, "h1") is not None
    metadata: Any = execution.metadata
    assert metadata["usage"] == [
        {"prompt_tokens": 40, "completion_tokens": 0, "tokens_unknown": True}
    ]
    assert metadata["tokens_known"] == 40
    assert '"tokens_unknown":true' in result.trace.model_dump_json()


async def test_an_unusable_reply_after_one_whose_usage_is_unknown_says_so(
    chat_server: ChatServer,
) -> None:
    payload = {"choices": [{"message": {"content": "prose"}}], "usage": None}
    chat_server.replies.append(Reply(body=json.dumps(payload)))
    async with provider(chat_server) as model:
        subject = analyst(model, max_repairs=0)
        engine = Engine()
        engine.register_suggestor(subject)
        result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens, execution.tokens_unknown) == ("failed", 0, True)
    assert LlmOutputError.__name__ in (execution.error or "")


async def test_a_10_mb_reply_leaves_no_copy_in_the_suggestors_own_records(
    chat_server: ChatServer,
) -> None:
    big = "x" * 10_000_000
    chat_server.replies += [
        completion(reply({"id": "big", "content": big, "confidence": 0.9})),
        completion(big),  # prose: unusable, sent back once, then the call fails
        completion(big),
    ]
    async with provider(chat_server) as model:
        engine = Engine(record_effects=True)
        engine.register_suggestor(analyst(model))
        refused = await engine.run(inputs=[QUESTION])
        engine = Engine(record_effects=True)
        engine.register_suggestor(analyst(model, max_repairs=1))
        unusable = await engine.run(inputs=[QUESTION])
    [rejection] = refused.rejections
    assert rejection.reason.startswith("content is 10000000 bytes, over the limit")
    [execution] = refused.trace.cycles[0].executions
    assert len(json.dumps(execution.metadata)) < 2_000  # no reply text in the metadata
    # The engine's own records (the effect, the rejection) are all that hold it.
    assert refused.trace.model_dump_json().count("x" * 100_000) <= 2 * 100
    [failed] = unusable.trace.cycles[0].executions
    assert failed.outcome == "failed"
    assert len(failed.error or "") < 1_000
    assert len(json.dumps(failed.metadata)) < 2_000
    assert len(failed.traceback or "") < 5_000
    echoed = chat_server.received[2].body["messages"][2]["content"]
    assert len(echoed) <= 4_000  # the repair echoes the reply cut short
    assert len(unusable.trace.model_dump_json()) < 100_000
