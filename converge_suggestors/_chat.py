"""The chat-model interface: messages, requests, responses, providers, and a scripted provider."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import ClassVar, Literal, Protocol, final, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "ChatMessage",
    "ChatProvider",
    "ChatRequest",
    "ChatResponse",
    "ProviderError",
    "ResponseSchema",
    "ScriptedChatProvider",
    "StructuredOutput",
    "ToolCall",
    "ToolSpec",
]

StructuredOutput = Literal["json_schema", "json_object", "none"]
"""How a provider asks the server to constrain a reply to a `ResponseSchema`.

`"json_schema"`: `response_format={"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}` (OpenAI, vLLM, Ollama); `"json_object"`: `{"type": "json_object", "schema": ...}`
(llama-cpp-python 0.3.x, whose `json_schema` answers HTTP 500); `"none"`: no
`response_format` (the prompt alone describes the reply).
"""


class _Frozen(BaseModel, frozen=True):
    """Frozen, closed models for the chat interface."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


@final
class ToolCall(_Frozen, frozen=True):
    """One call of a tool, as the model asked for it."""

    id: str
    """The call's id, which the answer to it (a `"tool"` message) names."""
    name: str
    """The tool the model asked for (not necessarily one it was offered)."""
    arguments: str
    """The arguments as the model wrote them: JSON text, not yet read or validated."""


@final
class ToolSpec(_Frozen, frozen=True):
    """A tool offered to the model: its name, what it does, the JSON schema of its arguments."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """Letters, digits, `_` and `-`, at most 64 (OpenAI's rule)."""
    description: str
    """What the tool does, for the model."""
    parameters: dict[str, JsonValue]
    """The JSON schema of its arguments object."""


@final
class ChatMessage(_Frozen, frozen=True):
    """One message of a conversation."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks; `"tool"` answers one tool call."""
    content: str
    """What is said."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls of an `"assistant"` message."""
    tool_call_id: str | None = None
    """The call a `"tool"` message answers."""


@final
class ResponseSchema(_Frozen, frozen=True):
    """The JSON schema a reply must match, for servers that constrain their output."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """A name for the schema (OpenAI requires one): letters, digits, `_` and `-`."""
    json_schema: dict[str, JsonValue]
    """The JSON schema of the whole reply."""
    strict: bool = True
    """Ask for strict adherence (OpenAI's `strict`); the schema must then close every object."""


@final
class ChatRequest(_Frozen, frozen=True):
    """A request for one completion.

    Every option left `None` (or empty) is not sent, so the server's default applies.
    """

    model: str
    """The model to ask; an empty string means the provider's default."""
    messages: tuple[ChatMessage, ...]
    """The conversation so far."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature; 0 for the most deterministic answer."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most completion tokens to generate, or `None` for the provider's limit."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling: only the most likely tokens whose probabilities add up to `top_p`."""
    seed: int | None = None
    """A sampling seed, for servers that make sampling reproducible with one."""
    stop: tuple[str, ...] = ()
    """Sequences that end the reply when generated."""
    response_schema: ResponseSchema | None = None
    """The schema the reply must match; the provider decides how (or whether) to send it."""
    tools: tuple[ToolSpec, ...] = ()
    """The tools the model may call; none by default."""
    tool_choice: str | None = None
    """`"auto"`, `"none"`, `"required"`, or the name of the one tool the reply must call;
    `None` for the server's default."""


@final
class ChatResponse(_Frozen, frozen=True):
    """One completion and what it cost."""

    content: str
    """The model's reply."""
    prompt_tokens: int = Field(default=0, ge=0)
    """Tokens in the prompt."""
    completion_tokens: int = Field(default=0, ge=0)
    """Tokens in the reply."""
    model: str = ""
    """The model that answered, as the provider reports it."""
    finish_reason: str | None = None
    """Why generation stopped (`"stop"`, `"length"`, ...), when the provider says."""
    tokens_unknown: bool = False
    """The provider did not report what the reply cost (no `usage`, or a count of `null`):
    the counts above are what it did report, 0 for the rest, a lower bound."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tools the model asked to call, in order; none for a plain reply."""


class ChatProvider(Protocol):
    """Anything that completes a chat request; no base class needed."""

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """Return the model's reply to `request`."""
        ...


@runtime_checkable
class StreamingChatProvider(ChatProvider, Protocol):
    """A `ChatProvider` that can also stream a reply's text as it is generated
    (`OpenAIChatProvider` can); `LlmSuggestor(..., stream=True)` needs one."""

    async def stream(
        self, request: ChatRequest, on_text: Callable[[int, str], Awaitable[None]], /
    ) -> ChatResponse:
        """Return what `complete` would, handing `on_text(attempt, text)` each new piece
        of the reply's text as it comes (`attempt` counts from 1; a new one starts again)."""
        ...


class ProviderError(Exception):
    """A provider could not produce a reply; the message says what happened and where.

    The engine reads `tokens` (a failed call still counts what it spent; `None` marks the
    execution `tokens_unknown`) and `metadata` (copied to `Execution.metadata`).
    """

    status: int | None
    """The HTTP status, when there was one."""
    tokens: int | None
    """Tokens spent before the failure, when known (0 for an error answer, or a request that
    never reached the server); `None` when unknown, the default (a call that timed out or
    was dropped may have generated any number of tokens on the server)."""
    metadata: dict[str, JsonValue]
    """What the trace should record about the call (`LlmSuggestor` fills it: model, options,
    attempts so far); empty by default."""
    tokens_unknown: bool
    """True when `tokens` counts only part of what was spent (earlier attempts whose usage is
    known, before one whose cost is not): the engine counts `tokens` as a lower bound."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        tokens: int | None = None,
        metadata: dict[str, JsonValue] | None = None,
        tokens_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.tokens = tokens
        self.metadata = dict(metadata or {})
        self.tokens_unknown = tokens_unknown


ScriptedReply = str | ChatResponse | Exception
Script = Sequence[ScriptedReply] | Callable[[ChatRequest], ScriptedReply]


@final
class ScriptedChatProvider:
    """A deterministic, offline provider: replies from a list, in order, or from a function.

    Each reply may be a plain string (token counts are then estimated as one per four
    characters, so token budgets behave realistically), a full `ChatResponse`, or an
    exception, which is raised. Every request is kept in `requests`.
    """

    def __init__(self, responses: Script, *, model: str = "scripted") -> None:
        self._responses = responses
        self._model = model
        self._used = 0
        self.requests: list[ChatRequest] = []
        """Every request received, in order."""

    def __repr__(self) -> str:
        return f"ScriptedChatProvider(model={self._model!r}, used={self._used})"

    @property
    def model(self) -> str:
        """The model name it reports."""
        return self._model

    @property
    def provider_name(self) -> str:
        """`"scripted"`: the `gen_ai.provider.name` of its telemetry spans."""
        return "scripted"

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """The next scripted reply.

        Raises:
            ProviderError: The list of replies is used up.
            Exception: The scripted reply is an exception.
        """
        self.requests.append(request)
        responses = self._responses
        if callable(responses):
            reply = responses(request)
        else:
            if self._used >= len(responses):
                raise ProviderError(
                    f"scripted provider has no reply left ({len(responses)} used)", tokens=0
                )
            reply = responses[self._used]
        self._used += 1
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, ChatResponse):
            return reply
        prompt = sum(len(message.content) for message in request.messages)
        return ChatResponse(
            content=reply,
            prompt_tokens=max(1, prompt // 4),
            completion_tokens=max(1, len(reply) // 4),
            model=request.model or self._model,
            finish_reason="stop",
        )
