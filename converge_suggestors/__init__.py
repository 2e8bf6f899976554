"""Ready-made suggestors for converge: seeds and reactions, validation, LLMs, and telemetry."""

from ._assignment import (
    AssignmentPack,
    AssignmentPair,
    AssignmentPlan,
    AssignmentProblem,
    AssignmentSuggestor,
)
from ._chat import (
    ChatMessage,
    ChatProvider,
    ChatRequest,
    ChatResponse,
    ProviderError,
    ResponseSchema,
    ScriptedChatProvider,
    StructuredOutput,
)
from ._llm import LlmOutputError, LlmSuggestor
from ._openai import OpenAIChatProvider
from ._otel import OpenTelemetryObserver
from ._pack import PackSuggestor
from ._policy import EntityUid, PolicyDecision, PolicyRequest, PolicySuggestor
from ._react import ReactOnceSuggestor
from ._retrieval import Embedder, HashingEmbedder, MiniLmEmbedder, RetrievalSuggestor
from ._rule import RuleSuggestor
from ._seed import SeedSuggestor
from ._validation import ValidationAgent, ValidationConfig, ValidationResult

__all__ = [
    "AssignmentPack",
    "AssignmentPair",
    "AssignmentPlan",
    "AssignmentProblem",
    "AssignmentSuggestor",
    "ChatMessage",
    "ChatProvider",
    "ChatRequest",
    "ChatResponse",
    "Embedder",
    "EntityUid",
    "HashingEmbedder",
    "LlmOutputError",
    "LlmSuggestor",
    "MiniLmEmbedder",
    "OpenAIChatProvider",
    "OpenTelemetryObserver",
    "PackSuggestor",
    "PolicyDecision",
    "PolicyRequest",
    "PolicySuggestor",
    "ProviderError",
    "ReactOnceSuggestor",
    "ResponseSchema",
    "RetrievalSuggestor",
    "RuleSuggestor",
    "ScriptedChatProvider",
    "SeedSuggestor",
    "StructuredOutput",
    "ValidationAgent",
    "ValidationConfig",
    "ValidationResult",
]


# Public classes report their public path (`converge_suggestors.LlmSuggestor`), as
# `converge`'s do, whatever private module they live in.
def _publish() -> None:
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and value.__module__.startswith(f"{__name__}._"):
            value.__module__ = __name__


_publish()
