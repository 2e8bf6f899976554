"""OpenTelemetryObserver: a run span, a span per cycle, a span per suggestor execution."""

import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from converge import AgentEffect, Context, Engine
from converge_suggestors import OpenTelemetryObserver, ReactOnceSuggestor, SeedSuggestor


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
