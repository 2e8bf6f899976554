"""Ready-made suggestors for converge: seeds and reactions, validation, LLMs, and telemetry."""

from ._chat import (
    ChatMessage,
    ChatProvider,
    ChatRequest,
    ChatResponse,
    ProviderError,
    ScriptedChatProvider,
)
from ._llm import LlmOutputError, LlmSuggestor
from ._openai import OpenAIChatProvider
from ._otel import OpenTelemetryObserver
from ._pack import PackSuggestor
from ._react import ReactOnceSuggestor
from ._rule import RuleSuggestor
from ._seed import SeedSuggestor
from ._validation import ValidationAgent, ValidationConfig, ValidationResult

__all__ = [
    "ChatMessage",
    "ChatProvider",
    "ChatRequest",
    "ChatResponse",
    "LlmOutputError",
    "LlmSuggestor",
    "OpenAIChatProvider",
    "OpenTelemetryObserver",
    "PackSuggestor",
    "ProviderError",
    "ReactOnceSuggestor",
    "RuleSuggestor",
    "ScriptedChatProvider",
    "SeedSuggestor",
    "ValidationAgent",
    "ValidationConfig",
    "ValidationResult",
]
