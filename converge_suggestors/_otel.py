"""`OpenTelemetryObserver`: engine events as OpenTelemetry spans (extra `otel`).

One span per run, a child span per cycle, and a child of the cycle per suggestor execution,
with the suggestor, cycle, proposals, promoted and rejected counts as attributes; a failed
execution's span has an error status and an `exception` event. The `opentelemetry-api`
package is imported when the observer is built. (Model calls get their own GenAI spans from
`LlmSuggestor`.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

from converge import (
    CycleFinished,
    CycleStarted,
    EngineEvent,
    RunFinished,
    RunStarted,
    SuggestorFailed,
    SuggestorFinished,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["OpenTelemetryObserver"]


def _api() -> object:
    try:
        import opentelemetry.trace as api
    except ImportError:
        raise ImportError(
            "OpenTelemetryObserver needs opentelemetry-api: install the 'otel' extra "
            '(pip install "converge-engine[otel]")'
        ) from None
    return api


@dataclass
class _Run:
    span: Span
    cycle: Span | None = None
    cycle_started_ns: int = 0
    counts: dict[str, int] = field(default_factory=dict[str, int])


@final
class OpenTelemetryObserver:
    """Turns engine events into spans: run → cycle → suggestor execution.

    Args:
        tracer_provider: Where spans go; the global provider by default.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        _api()
        from opentelemetry import trace

        self._tracer: Tracer = trace.get_tracer("converge", tracer_provider=tracer_provider)
        self._runs: dict[str, _Run] = {}

    def __repr__(self) -> str:
        return f"OpenTelemetryObserver(open_runs={len(self._runs)})"

    def on_event(self, event: EngineEvent, /) -> None:
        """Open or close the span the event marks."""
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        if isinstance(event, RunStarted):
            span = self._tracer.start_span(
                "converge.run",
                attributes={
                    "converge.run_id": event.run_id,
                    "converge.suggestors": event.suggestors,
                    "converge.inputs": event.inputs,
                },
            )
            self._runs[event.run_id] = _Run(span)
            return
        run = self._runs.get(event.run_id)
        if run is None:
            return
        if isinstance(event, CycleStarted):
            run.cycle_started_ns = time.time_ns()
            run.cycle = self._tracer.start_span(
                "converge.cycle",
                context=trace.set_span_in_context(run.span),
                start_time=run.cycle_started_ns,
                attributes={
                    "converge.cycle": event.cycle,
                    "converge.dirty": [key.value for key in event.dirty],
                },
            )
        elif isinstance(event, SuggestorFinished | SuggestorFailed):
            parent = run.cycle or run.span
            start = run.cycle_started_ns or time.time_ns()
            duration = (
                int(event.duration_ms * 1_000_000) if isinstance(event, SuggestorFinished) else 0
            )
            span = self._tracer.start_span(
                "converge.suggestor",
                context=trace.set_span_in_context(parent),
                start_time=start,
                attributes={
                    "converge.suggestor": event.suggestor,
                    "converge.suggestor_id": event.suggestor_id,
                    "converge.cycle": event.cycle,
                },
            )
            if isinstance(event, SuggestorFinished):
                span.set_attribute("converge.proposals", event.proposals)
                span.set_attribute("converge.tokens", event.tokens)
                span.set_attribute("converge.outcome", "ok")
            else:
                span.set_attribute("converge.outcome", event.outcome)
                span.set_attribute("converge.phase", event.phase)
                kind, _, message = event.error.partition(": ")
                span.set_attribute("error.type", kind)
                span.add_event("exception", {"exception.type": kind, "exception.message": message})
                span.set_status(Status(StatusCode.ERROR, event.error))
            span.end(end_time=start + duration if duration else None)
        elif isinstance(event, CycleFinished):
            if run.cycle is not None:
                run.cycle.set_attribute("converge.eligible", event.eligible)
                run.cycle.set_attribute("converge.promoted", event.promoted)
                run.cycle.set_attribute("converge.rejected", event.rejected)
                run.cycle.set_attribute("converge.held", event.held)
                run.cycle.set_attribute("converge.facts", event.facts)
                run.cycle.end()
                run.cycle = None
            for name, value in (("promoted", event.promoted), ("rejected", event.rejected)):
                run.counts[name] = run.counts.get(name, 0) + value
        elif isinstance(event, RunFinished):
            if run.cycle is not None:
                run.cycle.end()
            run.span.set_attribute("converge.stop_reason", event.stop_reason)
            run.span.set_attribute("converge.cycles", event.cycle)
            run.span.set_attribute("converge.facts", event.facts)
            run.span.set_attribute("converge.merkle_root", event.merkle_root)
            run.span.set_attribute("converge.tokens", event.tokens)
            run.span.set_attribute("converge.promoted", run.counts.get("promoted", 0))
            run.span.set_attribute("converge.rejected", run.counts.get("rejected", 0))
            if event.stop_reason not in ("converged", "awaiting_human"):
                run.span.set_status(Status(StatusCode.ERROR, event.detail))
            run.span.end()
            del self._runs[event.run_id]
