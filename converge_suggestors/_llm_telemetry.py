"""OpenTelemetry spans for model calls, with the GenAI semantic conventions (extra `otel`).

Nothing here needs `opentelemetry-api` unless it is installed: without it, `llm_tracer`
returns `None`, spans are no-ops and `record_retry` does nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, final

from ._chat import ChatRequest, ChatResponse

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = ["CallSpan", "chat_span", "llm_tracer", "record_retry"]

_SCOPE: Final = "converge_suggestors"


def llm_tracer(tracer_provider: TracerProvider | None = None) -> Tracer | None:
    """A tracer from `tracer_provider` (the global one by default), or `None` without the API."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)


@final
class CallSpan:
    """The span of one model call, or a stand-in that records nothing."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def response(self, response: ChatResponse) -> None:
        """Record what the call returned and cost."""
        span = self._span
        if span is None:
            return
        if response.model:
            span.set_attribute("gen_ai.response.model", response.model)
        span.set_attribute("gen_ai.usage.input_tokens", response.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", response.completion_tokens)
        if response.finish_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", (response.finish_reason,))

    def invalid(self, reason: str) -> None:
        """The reply came back but is not what was asked for."""
        span = self._span
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", "invalid_reply")
        span.add_event("converge.llm.invalid_reply", {"converge.llm.reason": reason})
        span.set_status(Status(StatusCode.ERROR, reason))

    def failed(self, error: BaseException) -> None:
        """The call raised `error`."""
        span = self._span
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(error)
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


@contextmanager
def chat_span(
    tracer: Tracer | None,
    request: ChatRequest,
    *,
    provider_name: str,
    model: str,
    suggestor: str,
    attempt: int,
) -> Generator[CallSpan]:
    """A client span `chat {model}` around one model call, current while it runs."""
    if tracer is None:
        yield CallSpan(None)
        return
    from opentelemetry.trace import SpanKind

    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": provider_name,
        "gen_ai.provider.name": provider_name,
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": request.temperature,
        "converge.suggestor": suggestor,
        "converge.llm.attempt": attempt,
    }
    if request.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = request.max_tokens
    if request.top_p is not None:
        attributes["gen_ai.request.top_p"] = request.top_p
    if request.seed is not None:
        attributes["gen_ai.request.seed"] = request.seed
    if request.stop:
        attributes["gen_ai.request.stop_sequences"] = request.stop
    if request.response_schema is not None:
        attributes["gen_ai.output.type"] = "json"
    with tracer.start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield CallSpan(span)


def record_retry(attempt: int, problem: str, status: int | None, delay: float) -> None:
    """An event on the current span (a model call's, if any): HTTP attempt `attempt` failed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes: dict[str, AttributeValue] = {
        "converge.http.attempt": attempt,
        "converge.http.problem": problem,
        "converge.http.retry_delay_s": delay,
    }
    if status is not None:
        attributes["http.response.status_code"] = status
    span.add_event("converge.http.retry", attributes)
