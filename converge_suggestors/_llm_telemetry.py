"""What is recorded about model calls: the trace's `Execution.metadata` (`CallRecord`), and
OpenTelemetry spans with the GenAI semantic conventions (extra `otel`).

Nothing here needs `opentelemetry-api` unless it is installed: without it, `llm_tracer`
returns `None`, spans are no-ops and `record_retry` does nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, final

from pydantic import JsonValue

from ._chat import ChatRequest, ChatResponse
from ._http import safe_url

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "CallRecord",
    "CallSpan",
    "chat_span",
    "describe_provider",
    "describe_text",
    "llm_tracer",
    "record_retry",
]

_SCOPE: Final = "converge_suggestors"
_PROBLEM: Final = 200


def describe_text(text: str | None) -> JsonValue:
    """A text the trace should identify without holding it: its length and a short digest."""
    if not text:
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return {"chars": len(text), "sha256": digest}


def describe_provider(provider: object) -> dict[str, JsonValue]:
    """Which provider answers: its `provider_name`, class, and endpoint without credentials."""
    name: object = getattr(provider, "provider_name", None)
    endpoint: object = getattr(provider, "endpoint", None)
    mode: object = getattr(provider, "structured_output", None)
    return {
        "provider": name if isinstance(name, str) else "unknown",
        "provider_class": type(provider).__name__,
        "endpoint": safe_url(endpoint) if isinstance(endpoint, str) else None,
        "structured_output": mode if isinstance(mode, str) else None,
    }


@final
class CallRecord:
    """What the trace records about one `execute`: the call's setup, then each attempt.

    `tokens` is the sum of every attempt's usage while all are known; once an attempt's cost
    is unknown (a call that timed out or was dropped, a reply without its usage), it is
    `None` and `known_tokens` holds what is known of the attempts' cost.
    """

    __slots__ = (
        "_answered_by",
        "_finish",
        "_problems",
        "_setup",
        "_unknown",
        "_usage",
        "invalid",
        "known_tokens",
        "tool_calls",
    )

    def __init__(self, setup: dict[str, JsonValue]) -> None:
        self._setup = setup
        self._answered_by: str | None = None
        self._usage: list[JsonValue] = []
        self._finish: list[JsonValue] = []
        self._problems: list[JsonValue] = []
        self._unknown = False
        self.known_tokens = 0
        """Tokens of the attempts whose cost is known."""
        self.invalid = 0
        """Invalid items of the usable reply, each recorded as a `DIAGNOSTIC` fact."""
        self.tool_calls: list[JsonValue] = []
        """Each tool call of the model: its name, arguments, and what became of it."""

    @property
    def tokens(self) -> int | None:
        """What every attempt cost, or `None` when some attempt's cost is unknown."""
        return None if self._unknown else self.known_tokens

    def answered(self, response: ChatResponse, problem: str | None) -> None:
        """An attempt came back with `response`; `problem` says why it is unusable, if it is."""
        usage: dict[str, JsonValue] = {
            "prompt_tokens": response.prompt_tokens,
            "completion_tokens": response.completion_tokens,
        }
        if response.tokens_unknown:
            usage["tokens_unknown"] = True
            self._unknown = True
        self._usage.append(usage)
        self._finish.append(response.finish_reason)
        self.known_tokens += response.prompt_tokens + response.completion_tokens
        if response.model:
            self._answered_by = response.model
        if problem is not None:
            cut = problem if len(problem) <= _PROBLEM else problem[: _PROBLEM - 1] + "…"
            self._problems.append(cut)

    def failed(self, tokens: int | None, *, unknown: bool = False) -> None:
        """An attempt raised; `tokens` is what it cost, `None` when unknown (or only part of
        it, with `unknown`)."""
        if tokens is None:
            self._usage.append(None)
            self._unknown = True
        else:
            usage: dict[str, JsonValue] = {"total_tokens": tokens}
            if unknown:
                usage["tokens_unknown"] = True
                self._unknown = True
            self._usage.append(usage)
            self.known_tokens += tokens
        self._finish.append(None)

    def metadata(self) -> dict[str, JsonValue]:
        """The JSON object for `AgentEffect.metadata` (or a failure's `metadata`)."""
        result: dict[str, JsonValue] = {
            **self._setup,
            "response_model": self._answered_by,
            "attempts": len(self._usage),
            "usage": list(self._usage),
            "finish_reasons": list(self._finish),
            "repairs": list(self._problems),
            "invalid_items": self.invalid,
        }
        if self._unknown:
            result["tokens_known"] = self.known_tokens
        if self.tool_calls:
            result["tool_calls"] = list(self.tool_calls)
        return result


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
