"""The chat-model interface: messages, requests, responses, providers, and a scripted provider."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Literal, Protocol, final

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatMessage",
    "ChatProvider",
    "ChatRequest",
    "ChatResponse",
    "ProviderError",
    "ScriptedChatProvider",
]


class _Frozen(BaseModel, frozen=True):
    """Frozen, closed models for the chat interface."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


@final
class ChatMessage(_Frozen, frozen=True):
    """One message of a conversation."""

    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str
    """What is said."""


@final
class ChatRequest(_Frozen, frozen=True):
    """A request for one completion."""

    model: str
    """The model to ask; an empty string means the provider's default."""
    messages: tuple[ChatMessage, ...]
    """The conversation so far."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature; 0 for the most deterministic answer."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most completion tokens to generate, or `None` for the provider's limit."""


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


class ChatProvider(Protocol):
    """Anything that completes a chat request; no base class needed."""

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """Return the model's reply to `request`."""
        ...


class ProviderError(Exception):
    """A provider could not produce a reply; the message names the status and an excerpt."""

    status: int | None
    """The HTTP status, when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


Script = Sequence[str | ChatResponse] | Callable[[ChatRequest], str | ChatResponse]


@final
class ScriptedChatProvider:
    """A deterministic, offline provider: replies from a list, in order, or from a function.

    Each reply may be a plain string (token counts are then estimated as one per four
    characters, so token budgets behave realistically) or a full `ChatResponse`. Every request
    is kept in `requests`.
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

    async def complete(self, request: ChatRequest, /) -> ChatResponse:
        """The next scripted reply.

        Raises:
            ProviderError: The list of replies is used up.
        """
        self.requests.append(request)
        responses = self._responses
        if callable(responses):
            reply = responses(request)
        else:
            if self._used >= len(responses):
                raise ProviderError(f"scripted provider has no reply left ({len(responses)} used)")
            reply = responses[self._used]
        self._used += 1
        if isinstance(reply, ChatResponse):
            return reply
        prompt = sum(len(message.content) for message in request.messages)
        return ChatResponse(
            content=reply,
            prompt_tokens=max(1, prompt // 4),
            completion_tokens=max(1, len(reply) // 4),
            model=request.model or self._model,
        )
