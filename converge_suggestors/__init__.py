"""Ready-made suggestors for converge: seeds and reactions, validation, LLMs, and telemetry."""

from ._action import ActionRunner, idempotency_key
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
    StreamingChatProvider,
    StructuredOutput,
    ToolCall,
    ToolSpec,
)
from ._llm import LlmOutputError, LlmSuggestor
from ._mcp import McpServer, McpTool, McpToolError
from ._openai import OpenAIChatProvider
from ._otel import OpenTelemetryObserver
from ._pack import PackSuggestor
from ._policy import EntityUid, PolicyDecision, PolicyRequest, PolicySuggestor
from ._react import ReactOnceSuggestor
from ._retrieval import Embedder, HashingEmbedder, MiniLmEmbedder, RetrievalSuggestor
from ._rule import RuleSuggestor
from ._seed import SeedSuggestor
from ._tool import ACTION_RESULTS, ACTIONS, ActionOutcome, ActionRequest, Tool, ToolKind
from ._validation import ValidationAgent, ValidationConfig, ValidationResult

__all__ = [
    "ACTIONS",
    "ACTION_RESULTS",
    "ActionOutcome",
    "ActionRequest",
    "ActionRunner",
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
    "McpServer",
    "McpTool",
    "McpToolError",
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
    "StreamingChatProvider",
    "StructuredOutput",
    "Tool",
    "ToolCall",
    "ToolKind",
    "ToolSpec",
    "ValidationAgent",
    "ValidationConfig",
    "ValidationResult",
    "idempotency_key",
]


# Public classes report their public path (`converge_suggestors.LlmSuggestor`), as
# `converge`'s do, whatever private module they live in.
def _publish() -> None:
    for name in __all__:
        value = globals()[name]
        if (isinstance(value, type) or callable(value)) and getattr(
            value, "__module__", ""
        ).startswith(f"{__name__}._"):
            value.__module__ = __name__


_publish()
