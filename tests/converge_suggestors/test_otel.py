"""OpenTelemetryObserver: a run span, a span per cycle, a span per suggestor execution."""

import json
import sys

import pytest
from chat_server import ChatServer, Reply, completion
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from converge import AgentEffect, Context, ContextKey, Engine
from converge_suggestors import (
    ChatProvider,
    ChatResponse,
    LlmSuggestor,
    OpenAIChatProvider,
    OpenTelemetryObserver,
    ProviderError,
    ReactOnceSuggestor,
    ScriptedChatProvider,
    SeedSuggestor,
)
from tests.doubles import seed


def traced() -> tuple[InMemorySpanExporter, OpenTelemetryObserver]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, OpenTelemetryObserver(provider)


async def test_spans_nest_run_cycle_suggestor() -> None:
    exporter, observer = traced()
    engine = Engine(observers=[observer])
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    engine.register_suggestor(ReactOnceSuggestor("h1", "world"))
    result = await engine.run()
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name == "converge.run"]
    cycles = [s for s in spans if s.name == "converge.cycle"]
    executions = [s for s in spans if s.name == "converge.suggestor"]
    assert len(runs) == 1
    assert len(cycles) == 3
    assert len(executions) == 2
    run = runs[0]
    assert run.context is not None
    assert run.attributes is not None
    assert run.attributes["converge.run_id"] == result.run_id
    assert run.attributes["converge.stop_reason"] == "converged"
    assert run.attributes["converge.promoted"] == 2
    assert run.attributes["converge.merkle_root"] == result.integrity.merkle_root
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in cycles)
    first_cycle = min(cycles, key=lambda s: s.start_time or 0)
    assert first_cycle.context is not None
    seed_span = next(s for s in executions if s.attributes and s.attributes["converge.cycle"] == 1)
    assert seed_span.parent is not None
    assert seed_span.parent.span_id == first_cycle.context.span_id
    assert seed_span.attributes is not None
    assert seed_span.attributes["converge.suggestor"] == "seed:seeds/s1"
    assert seed_span.attributes["converge.proposals"] == 1
    assert first_cycle.attributes is not None
    assert first_cycle.attributes["converge.promoted"] == 1


async def test_a_failed_execution_span_has_error_status() -> None:
    class Broken:
        name = "broken"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise RuntimeError("boom")

    exporter, observer = traced()
    engine = Engine(observers=[observer])
    engine.register_suggestor(Broken())
    await engine.run()
    [span] = [s for s in exporter.get_finished_spans() if s.name == "converge.suggestor"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RuntimeError: boom"


def test_observer_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ImportError, match=r"install the 'otel' extra"):
        OpenTelemetryObserver()


# --- GenAI spans of model calls --------------------------------------------------------------


def exporter_and_provider() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def llm(provider: ChatProvider, tracer_provider: TracerProvider, **options: object) -> LlmSuggestor:
    return LlmSuggestor(
        "analyst",
        provider,
        dependencies=[ContextKey.SEEDS],
        target=ContextKey.HYPOTHESES,
        instructions="Guess.",
        tracer_provider=tracer_provider,
        **options,  # pyright: ignore[reportArgumentType]
    )


GOOD = json.dumps({"proposals": [{"id": "h1", "content": "A guess.", "confidence": 0.7}]})


async def test_one_genai_span_per_model_call_attempt() -> None:
    exporter, tracer_provider = exporter_and_provider()
    scripted = ScriptedChatProvider(
        [
            ChatResponse(content="oops", prompt_tokens=40, completion_tokens=2, model="tiny"),
            ChatResponse(
                content=GOOD,
                prompt_tokens=60,
                completion_tokens=20,
                model="tiny-v2",
                finish_reason="stop",
            ),
        ],
        model="tiny",
    )
    engine = Engine()
    engine.register_suggestor(
        llm(scripted, tracer_provider, max_tokens=100, temperature=0.2, top_p=0.5, seed=9)
    )
    await engine.run(inputs=[seed("q", "Weather?", provenance="input:test")])
    first, second = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert first.name == second.name == "chat tiny"
    assert first.kind is SpanKind.CLIENT
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "scripted",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "tiny",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 100,
        "gen_ai.request.top_p": 0.5,
        "gen_ai.request.seed": 9,
        "gen_ai.output.type": "json",
        "converge.suggestor": "analyst",
        "converge.llm.attempt": 1,
        "gen_ai.response.model": "tiny",
        "gen_ai.usage.input_tokens": 40,
        "gen_ai.usage.output_tokens": 2,
        "error.type": "invalid_reply",
    }
    assert first.status.status_code is StatusCode.ERROR
    assert [event.name for event in first.events] == ["converge.llm.invalid_reply"]
    attributes = second.attributes or {}
    assert attributes["converge.llm.attempt"] == 2
    assert attributes["gen_ai.usage.input_tokens"] == 60
    assert attributes["gen_ai.usage.output_tokens"] == 20
    assert attributes["gen_ai.response.model"] == "tiny-v2"
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert second.status.status_code is StatusCode.UNSET


async def test_a_failed_call_span_records_the_exception() -> None:
    exporter, tracer_provider = exporter_and_provider()
    scripted = ScriptedChatProvider([ProviderError("POST u timed out", tokens=None)])
    engine = Engine()
    engine.register_suggestor(llm(scripted, tracer_provider))
    await engine.run(inputs=[seed("q", "Weather?", provenance="input:test")])
    [span] = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ProviderError: POST u timed out"
    [event] = span.events
    assert event.name == "exception"
    assert str((event.attributes or {})["exception.type"]).endswith("ProviderError")
    assert (span.attributes or {})["error.type"] == "ProviderError"


async def test_http_retries_are_events_on_the_call_span(chat_server: ChatServer) -> None:
    exporter, tracer_provider = exporter_and_provider()
    chat_server.replies += [
        Reply(429, "slow down", {"Retry-After": "0"}),
        completion(GOOD, prompt=30, completion_tokens=12),
    ]
    async with OpenAIChatProvider(chat_server.base_url, "", model="m", backoff=0) as provider:
        engine = Engine()
        engine.register_suggestor(llm(provider, tracer_provider))
        await engine.run(inputs=[seed("q", "Weather?", provenance="input:test")])
    [span] = exporter.get_finished_spans()
    assert span.name == "chat m"
    attributes = span.attributes or {}
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.max_tokens"] == 512
    assert attributes["gen_ai.usage.input_tokens"] == 30
    [retry] = span.events
    assert retry.name == "converge.http.retry"
    assert (retry.attributes or {})["http.response.status_code"] == 429


async def test_a_failed_execution_span_has_an_exception_event() -> None:
    exporter, observer = traced()
    engine = Engine(observers=[observer])
    engine.register_suggestor(
        LlmSuggestor(
            "analyst",
            ScriptedChatProvider(["nope"]),
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Guess.",
            max_repairs=0,
        )
    )
    await engine.run(inputs=[seed("q", "Weather?", provenance="input:test")])
    [span] = [s for s in exporter.get_finished_spans() if s.name == "converge.suggestor"]
    [event] = span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "LlmOutputError"
    assert str((event.attributes or {})["exception.message"]).startswith("analyst: no usable")
