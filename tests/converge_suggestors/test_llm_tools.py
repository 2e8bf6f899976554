"""`LlmSuggestor` with tools: read tools run and are recorded, actions are staged, never run."""

from __future__ import annotations

import json
from collections.abc import Sequence

import anyio
import pytest
from pydantic import JsonValue

from converge import ContextKey, ConvergeResult, Engine, GateDecision, HitlPolicy, ProposedFact
from converge_suggestors import (
    ACTIONS,
    ActionRequest,
    ChatResponse,
    LlmSuggestor,
    ScriptedChatProvider,
    Tool,
    ToolCall,
)

ANSWER = json.dumps({"proposals": [{"id": "rain", "content": "It rains.", "confidence": 0.7}]})
NOTHING = json.dumps({"proposals": []})

calls: list[str] = []


def forecast(city: str) -> dict[str, str]:
    """The forecast for a city."""
    calls.append(city)
    return {"city": city, "sky": "rain"}


def send_email(to: str, body: str, *, idempotency_key: str) -> str:
    """Send an email."""
    raise AssertionError("an action never runs inside the suggestor")


def asking(*calls_: tuple[str, str]) -> ChatResponse:
    """A reply that calls tools: (name, arguments text) each."""
    return ChatResponse(
        content="",
        tool_calls=tuple(
            ToolCall(id=f"call-{index}", name=name, arguments=arguments)
            for index, (name, arguments) in enumerate(calls_)
        ),
        prompt_tokens=10,
        completion_tokens=5,
    )


def suggestor(
    script: Sequence[str | ChatResponse], *, max_tool_turns: int = 4
) -> tuple[LlmSuggestor, ScriptedChatProvider]:
    provider = ScriptedChatProvider(script)
    return LlmSuggestor(
        "forecaster",
        provider,
        dependencies=[ContextKey.SEEDS],
        target=ContextKey.HYPOTHESES,
        instructions="Forecast.",
        tools=[Tool(forecast), Tool(send_email, kind="action")],
        max_tool_turns=max_tool_turns,
    ), provider


SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="Weather in Oslo?", provenance="input")


def run(llm: LlmSuggestor, *, hitl: HitlPolicy | None = None) -> ConvergeResult:
    engine = Engine(hitl=hitl)
    engine.register_suggestor(llm)
    return engine.run_sync(inputs=[SEED])


@pytest.fixture(autouse=True)
def _clear() -> None:
    calls.clear()


def tool_calls_of(result: ConvergeResult) -> list[dict[str, JsonValue]]:
    [execution] = result.trace.cycles[0].executions
    assert isinstance(execution.metadata, dict)
    entries = execution.metadata["tool_calls"]
    assert isinstance(entries, list)
    return [entry for entry in entries if isinstance(entry, dict)]


def test_llm_offers_its_tools_with_their_schemas() -> None:
    llm, provider = suggestor([NOTHING])
    run(llm)
    request = provider.requests[0]
    assert [tool.name for tool in request.tools] == ["forecast", "send_email"]


def test_llm_runs_a_read_tool_and_records_its_arguments_and_result() -> None:
    llm, provider = suggestor([asking(("forecast", '{"city": "Oslo"}')), ANSWER])
    result = run(llm)
    assert calls == ["Oslo"]
    assert result.context.find(ContextKey.PROPOSALS, "rain") is not None
    [entry] = tool_calls_of(result)
    assert entry["status"] == "ok"
    assert entry["arguments"] == '{"city": "Oslo"}'
    assert entry["result"] == {"city": "Oslo", "sky": "rain"}
    second = provider.requests[1]
    assert second.messages[-1].role == "tool"
    assert second.messages[-1].tool_call_id == "call-0"
    assert json.loads(second.messages[-1].content) == {"city": "Oslo", "sky": "rain"}


@pytest.mark.parametrize(
    ("call", "status", "answer"),
    [
        (("rm_rf", "{}"), "unknown_tool", "Error: there is no tool named 'rm_rf'"),
        (("forecast", '{"city": 1}'), "invalid", "Error: invalid arguments for forecast: city"),
        (("forecast", "not json"), "invalid", "Error: invalid arguments for forecast: the"),
        (("send_email", '{"to": "a@b"}'), "invalid", "Error: invalid arguments for send_email"),
    ],
)
def test_llm_answers_a_bad_tool_call_with_its_problem_and_records_it(
    call: tuple[str, str], status: str, answer: str
) -> None:
    llm, provider = suggestor([asking(call), ANSWER])
    result = run(llm)
    assert calls == []
    [entry] = tool_calls_of(result)
    assert entry["status"] == status
    second = provider.requests[1]
    assert second.messages[-1].content.startswith(answer)
    assert result.context.get(ACTIONS) == ()


def test_llm_records_a_tool_that_raises_as_failed_and_tells_the_model() -> None:
    def broken(city: str) -> str:
        """Broken."""
        raise RuntimeError(f"database down for {city}")

    llm = LlmSuggestor(
        "forecaster",
        ScriptedChatProvider([asking(("broken", '{"city": "Oslo"}')), ANSWER]),
        dependencies=[ContextKey.SEEDS],
        target=ContextKey.HYPOTHESES,
        instructions="Forecast.",
        tools=[Tool(broken)],
    )
    result = run(llm)
    [entry] = tool_calls_of(result)
    assert entry["status"] == "failed"
    assert entry["error"] == "RuntimeError: database down for Oslo"


def test_llm_fails_when_the_model_calls_tools_beyond_max_tool_turns() -> None:
    endless = [asking(("forecast", '{"city": "Oslo"}'))] * 10
    llm, _ = suggestor(endless, max_tool_turns=3)
    result = run(llm)
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert "more than 3 replies (max_tool_turns)" in (execution.error or "")
    assert calls == ["Oslo"] * 3
    assert execution.tokens == 4 * 15


def test_llm_stages_an_action_under_actions_and_never_runs_it() -> None:
    arguments = '{"to": "ops@example.com", "body": "Bring umbrellas", "reason": "rain in Oslo"}'
    llm, _ = suggestor([asking(("send_email", arguments)), ANSWER])
    result = run(llm, hitl=HitlPolicy(gated_keys=frozenset({ACTIONS})))
    assert result.stop_reason == "awaiting_human"
    [gate] = result.pending
    proposal = gate.proposal
    assert proposal.key == ACTIONS
    request = ActionRequest.model_validate(proposal.payload)
    assert request.tool == "send_email"
    assert request.arguments == {"to": "ops@example.com", "body": "Bring umbrellas"}
    assert request.reason == "rain in Oslo"
    assert proposal.evidence == ("seeds/q",)
    assert "Bring umbrellas" in proposal.content
    [entry] = tool_calls_of(result)
    assert entry["status"] == "proposed"


def test_llm_shows_the_model_its_rejected_action_when_it_runs_again() -> None:
    arguments = '{"to": "ops@example.com", "body": "Panic", "reason": "rain"}'
    again = json.dumps({"proposals": [{"id": "calm", "content": "Stay calm.", "confidence": 0.5}]})
    llm, provider = suggestor([asking(("send_email", arguments)), NOTHING, again])
    hitl = HitlPolicy(gated_keys=frozenset({ACTIONS}))
    engine = Engine(hitl=hitl)
    engine.register_suggestor(llm)
    paused = engine.run_sync(inputs=[SEED])
    assert paused.checkpoint is not None
    [gate] = paused.pending
    decision = GateDecision.reject(gate.gate_id, by="jane", reason="no panic")
    resumed = anyio.run(engine.resume, paused.checkpoint, [decision])
    assert resumed.context.get(ACTIONS) == ()
    engine2 = Engine(hitl=hitl)
    engine2.register_suggestor(llm)
    extra = ProposedFact(key=ContextKey.SEEDS, id="q2", content="And now?", provenance="input")
    anyio.run(lambda: engine2.run(resumed.context, inputs=[extra]))
    last = provider.requests[-1]
    assert "rejected" in last.messages[1].content
    assert "no panic" in last.messages[1].content


def test_llm_first_tool_is_asked_for_in_the_first_request_only() -> None:
    provider = ScriptedChatProvider([asking(("forecast", '{"city": "Oslo"}')), ANSWER])
    llm = LlmSuggestor(
        "forecaster",
        provider,
        dependencies=[ContextKey.SEEDS],
        target=ContextKey.HYPOTHESES,
        instructions="Forecast.",
        tools=[Tool(forecast)],
        first_tool="forecast",
    )
    run(llm)
    assert [request.tool_choice for request in provider.requests] == ["forecast", None]


def test_llm_refuses_a_first_tool_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="first_tool 'nope' is not one of its tools"):
        LlmSuggestor(
            "forecaster",
            ScriptedChatProvider([]),
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Forecast.",
            tools=[Tool(forecast)],
            first_tool="nope",
        )


@pytest.mark.parametrize("turns", [0, 9])
def test_llm_refuses_max_tool_turns_outside_one_to_eight(turns: int) -> None:
    with pytest.raises(ValueError, match="max_tool_turns must be from 1 to 8"):
        suggestor([], max_tool_turns=turns)


def test_llm_records_the_most_hostile_calls_allowed_within_the_metadata_limit() -> None:
    """8 replies of 8 calls each, every one as large and as costly to encode as it can be."""
    huge = "\x01" * 10_000
    reply = ChatResponse(
        content="",
        tool_calls=tuple(
            ToolCall(id=huge, name=huge, arguments=json.dumps({"city": huge})) for _ in range(9)
        ),
    )
    llm, _ = suggestor([reply] * 8 + [ANSWER], max_tool_turns=8)
    result = run(llm)
    entries = tool_calls_of(result)
    assert len(entries) == 8 * 9
    assert {str(entry["status"]) for entry in entries} == {"unknown_tool", "not_run"}
    assert result.context.find(ContextKey.PROPOSALS, "rain") is not None


def test_llm_records_a_long_result_cut_with_its_length() -> None:
    def long(city: str) -> str:
        """Long."""
        return city * 1000

    provider = ScriptedChatProvider([asking(("long", '{"city": "ab"}')), ANSWER])
    llm = LlmSuggestor(
        "forecaster",
        provider,
        dependencies=[ContextKey.SEEDS],
        target=ContextKey.HYPOTHESES,
        instructions="Forecast.",
        tools=[Tool(long)],
    )
    [entry] = tool_calls_of(run(llm))
    assert entry["result_chars"] == 2002
    assert isinstance(entry["result"], str)
    assert len(entry["result"]) == 800
    assert len(provider.requests[1].messages[-1].content) == 2002  # the model gets it all
