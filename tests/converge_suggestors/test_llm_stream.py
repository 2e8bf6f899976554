"""`LlmSuggestor(..., stream=True)` under `Engine.stream`: the reply's text comes as
`TokenStreamed` events, and the run records exactly what it records without streaming."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import aclosing
from typing import Any

import pytest
from chat_server import ChatServer, Received, Reply

from converge import (
    ContextKey,
    ConvergeResult,
    Engine,
    EngineEvent,
    ProposedFact,
    RunStore,
    TokenStreamed,
    event_adapter,
)
from converge_suggestors import (
    LlmSuggestor,
    OpenAIChatProvider,
    ScriptedChatProvider,
    Tool,
)

KEY = "sk-llm-stream-SECRET-0123456789"
SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="Oslo weather?", provenance="input")
FINAL = json.dumps(
    {"proposals": [{"id": "rain", "content": "Rain, \U0001f327 \u00e9t\u00e9.", "confidence": 0.6}]}
)


def lookup(city: str) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "sky": "rain"}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"model": "s-model", "choices": [choice]}).encode() + b"\n\n"


def respond(received: Received) -> Reply:
    """A tool call first, then the final answer; streamed when the request asks for it."""
    turn = sum(1 for m in received.body["messages"] if m["role"] == "tool") == 0
    calls = [{"id": "call_0", "type": "function", "function": {"name": "lookup"}}]
    calls[0]["function"]["arguments"] = json.dumps({"city": "Oslo"})  # type: ignore[index]
    usage = {"prompt_tokens": 20, "completion_tokens": 9}
    if not received.body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": "" if turn else FINAL}
        if turn:
            message["tool_calls"] = calls
        finish = "tool_calls" if turn else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        body = {"model": "s-model", "choices": [choice], "usage": usage}
        return Reply(body=json.dumps(body))
    if turn:
        parts = [chunk({"tool_calls": [{"index": 0, **calls[0]}]}, "tool_calls")]
    else:
        parts = [chunk({"content": FINAL[i : i + 5]}) for i in range(0, len(FINAL), 5)]
        parts.append(chunk({}, "stop"))
    parts.append(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    data = b"".join(parts)
    return Reply(chunks=(data[i : i + 3] for i in range(0, len(data), 3)))


class Seen:
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_event(self, event: EngineEvent, /) -> None:
        self.events.append(event)


def engine(
    server: ChatServer, seen: Seen, *, stream: bool = True, store: RunStore | None = None
) -> Engine:
    provider = OpenAIChatProvider(server.base_url, KEY, model="m-1", max_retries=0)
    built = Engine(observers=[seen], record_effects=True, store=store)
    built.register_suggestor(
        LlmSuggestor(
            "forecaster",
            provider,
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Forecast.",
            tools=[Tool(lookup)],
            stream=stream,
        )
    )
    return built


async def streamed(built: Engine) -> tuple[Sequence[object], ConvergeResult]:
    async with aclosing(built.stream(inputs=[SEED], tokens=True)) as items:
        got = [item async for item in items]
    result = got[-1]
    assert isinstance(result, ConvergeResult)
    return got[:-1], result


def recorded(result: ConvergeResult) -> list[Any]:
    """What the run recorded, less its id and timings."""
    return [
        [
            execution.model_dump(mode="json", exclude={"duration_ms"})
            for execution in cycle.executions
        ]
        for cycle in result.trace.cycles
    ]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    running = ChatServer(respond)
    running.start()
    yield running
    running.stop()


async def test_tokens_stream_and_the_record_is_the_same_as_without(server: ChatServer) -> None:
    seen = Seen()
    items, result = await streamed(engine(server, seen))
    tokens = [item for item in items if isinstance(item, TokenStreamed)]
    assert "".join(token.text for token in tokens) == FINAL
    assert len(tokens) > 1
    assert {(t.suggestor, t.cycle, t.call, t.attempt) for t in tokens} == {("forecaster", 1, 2, 1)}
    assert {t.run_id for t in tokens} == {result.run_id}
    assert [r.body.get("stream") for r in server.received] == [True, True]
    # the tokens come while the suggestor runs: after its cycle starts, before it finishes
    kinds = [getattr(item, "type", "") for item in items]
    assert kinds.index("cycle_started") < kinds.index("token")
    assert max(i for i, k in enumerate(kinds) if k == "token") < kinds.index("suggestor_finished")
    # observers, the record and the trace never see a token
    assert not any(isinstance(event, TokenStreamed) for event in seen.events)
    assert len(seen.events) == len(items) - len(tokens)
    assert '"token"' not in result.trace.model_dump_json()

    plain_seen = Seen()
    plain = await engine(server, plain_seen, stream=False).run(inputs=[SEED])
    assert [r.body.get("stream") for r in server.received[2:]] == [None, None]
    assert plain.context.merkle_root() == result.context.merkle_root()
    assert plain.integrity == result.integrity
    assert recorded(plain) == recorded(result)
    assert result.trace.cycles[0].executions[0].effect is not None  # effects compared too
    assert [type(e) for e in plain_seen.events] == [type(e) for e in seen.events]


async def test_without_a_stream_listening_a_streaming_suggestor_makes_whole_calls(
    server: ChatServer,
) -> None:
    result = await engine(server, Seen()).run(inputs=[SEED])
    assert result.context.get(ContextKey.PROPOSALS)
    assert [r.body.get("stream") for r in server.received] == [None, None]


async def test_a_token_event_serialises_but_is_not_an_engine_event() -> None:
    token = TokenStreamed(run_id="r", cycle=1, suggestor="s", call=1, attempt=1, text="\u00e9")
    assert TokenStreamed.model_validate_json(token.model_dump_json()) == token
    with pytest.raises(ValueError, match="token"):
        event_adapter.validate_json(token.model_dump_json())


def test_stream_needs_a_provider_that_streams() -> None:
    with pytest.raises(ValueError, match=r"'scripted': stream=True needs a provider"):
        LlmSuggestor(
            "scripted",
            ScriptedChatProvider([]),
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="x",
            stream=True,
        )
