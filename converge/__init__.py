"""converge: a correctness-first convergence engine for multi-agent systems.

Suggestors read one immutable context and propose facts; the engine alone decides what
becomes a fact, merges deterministically in registration order, and runs cycles until
nothing changes, a budget runs out, an invariant fails, a conflict stops it, or a human
must decide.
"""

import importlib as _importlib
import typing as _typing

from ._core._budget import Budget
from ._core._checkpoint import Checkpoint, FactRecord, ForkKind, Lineage
from ._core._context import Context, ContextSnapshot
from ._core._decorator import FunctionSuggestor, SuggestorFunction, suggestor
from ._core._effect import AgentEffect, Refusal
from ._core._events import (
    CycleFinished,
    CycleStarted,
    EngineEvent,
    FactPromoted,
    GateDecided,
    GateRequested,
    InvariantViolated,
    Observer,
    ProposalRejected,
    RunFinished,
    RunStarted,
    SuggestorBlocked,
    SuggestorFailed,
    SuggestorFinished,
    event_adapter,
)
from ._core._exceptions import (
    AwaitingHumanError,
    BudgetExhaustedError,
    ConfigurationError,
    ConflictError,
    ConvergeError,
    ForkError,
    InvalidCheckpointError,
    InvalidResumeError,
    InvariantViolationError,
    ReplayError,
    RunError,
    RunNotFoundError,
    StaleRecordError,
    StoreError,
    SuggestorExitError,
    SuggestorFailuresError,
    WorkerError,
)
from ._core._fact import Fact, GateKind, PromotionRecord
from ._core._hitl import GateDecision, GateRequest, HitlPolicy, TimeoutAction
from ._core._integrity import IntegrityProof, verify
from ._core._invariant import Invariant, InvariantClass, InvariantResult, Violation
from ._core._join import missing, ready
from ._core._key import AnyKey, ContextKey, Key, KeyLike, key_named, known_keys
from ._core._listing import PendingGate, RunSummary
from ._core._pack import GateVerdict, Pack
from ._core._progress import EntryCounts, ProgressHead, RunProgress
from ._core._proposal import ProposedFact
from ._core._public import publish as _publish
from ._core._record import RunRecord
from ._core._record_head import RecordHead, RunFinal
from ._core._result import Conflict, ConvergeResult
from ._core._stop import RunStatus, StopReason
from ._core._store import RowStore, RunStore
from ._core._suggestor import Suggestor, SuggestorId
from ._core._tokens import TokenSink, TokenStreamed, token_sink
from ._core._trace import (
    Continuation,
    CycleTrace,
    Execution,
    Outcome,
    Rejection,
    RunTimes,
    RunTrace,
)
from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:  # imported on first use (`__getattr__`)
    from ._engine import Engine
    from ._formation import EngineOptions, Formation
    from ._isolation._suggestor import IsolatedSuggestor, WorkerPool, isolated
    from ._kernel._executor import ErrorMode
    from ._kernel._gate import PromotionPolicy
    from ._kernel._log import get_logger
    from ._kernel._merge import ConflictMode
    from ._kernel._retry import RetryPolicy
    from ._report._render import render_report
    from .stores import PostgresRunStore, SqliteRunStore
    from .stores._durable import Durability

__all__ = [
    "AgentEffect",
    "AnyKey",
    "AwaitingHumanError",
    "Budget",
    "BudgetExhaustedError",
    "Checkpoint",
    "ConfigurationError",
    "Conflict",
    "ConflictError",
    "ConflictMode",
    "Context",
    "ContextKey",
    "ContextSnapshot",
    "Continuation",
    "ConvergeError",
    "ConvergeResult",
    "CycleFinished",
    "CycleStarted",
    "CycleTrace",
    "Durability",
    "Engine",
    "EngineEvent",
    "EngineOptions",
    "EntryCounts",
    "ErrorMode",
    "Execution",
    "Fact",
    "FactPromoted",
    "FactRecord",
    "ForkError",
    "ForkKind",
    "Formation",
    "FunctionSuggestor",
    "GateDecided",
    "GateDecision",
    "GateKind",
    "GateRequest",
    "GateRequested",
    "GateVerdict",
    "HitlPolicy",
    "IntegrityProof",
    "InvalidCheckpointError",
    "InvalidResumeError",
    "Invariant",
    "InvariantClass",
    "InvariantResult",
    "InvariantViolated",
    "InvariantViolationError",
    "IsolatedSuggestor",
    "Key",
    "KeyLike",
    "Lineage",
    "Observer",
    "Outcome",
    "Pack",
    "PendingGate",
    "PostgresRunStore",
    "ProgressHead",
    "PromotionPolicy",
    "PromotionRecord",
    "ProposalRejected",
    "ProposedFact",
    "RecordHead",
    "Refusal",
    "Rejection",
    "ReplayError",
    "RetryPolicy",
    "RowStore",
    "RunError",
    "RunFinal",
    "RunFinished",
    "RunNotFoundError",
    "RunProgress",
    "RunRecord",
    "RunStarted",
    "RunStatus",
    "RunStore",
    "RunSummary",
    "RunTimes",
    "RunTrace",
    "SqliteRunStore",
    "StaleRecordError",
    "StopReason",
    "StoreError",
    "Suggestor",
    "SuggestorBlocked",
    "SuggestorExitError",
    "SuggestorFailed",
    "SuggestorFailuresError",
    "SuggestorFinished",
    "SuggestorFunction",
    "SuggestorId",
    "TimeoutAction",
    "TokenSink",
    "TokenStreamed",
    "Violation",
    "WorkerError",
    "WorkerPool",
    "event_adapter",
    "get_logger",
    "isolated",
    "key_named",
    "known_keys",
    "missing",
    "ready",
    "render_report",
    "suggestor",
    "token_sink",
    "verify",
]

_LATER: _typing.Final = {
    "ConflictMode": "._kernel._merge",
    "Durability": ".stores._durable",
    "Engine": "._engine",
    "EngineOptions": "._formation",
    "ErrorMode": "._kernel._executor",
    "Formation": "._formation",
    "IsolatedSuggestor": "._isolation._suggestor",
    "PostgresRunStore": ".stores",
    "PromotionPolicy": "._kernel._gate",
    "RetryPolicy": "._kernel._retry",
    "SqliteRunStore": ".stores",
    "WorkerPool": "._isolation._suggestor",
    "get_logger": "._kernel._log",
    "isolated": "._isolation._suggestor",
    "render_report": "._report._render",
}
"""The public names of the engine, its stores, workers and report, by the module that holds
each: imported on first use, so that a command that only reads a store (`converge runs`,
`show`, `review`) loads no engine (a fifth of `import converge`). The rest, the models and
errors a record or a pickle names, are imported with the package."""

_publish(__name__, globals(), [name for name in __all__ if name not in _LATER])

if not _typing.TYPE_CHECKING:  # for a type checker, a misspelt name stays an error

    def __getattr__(name: str) -> object:
        """A name of `_LATER`, imported now, kept and published (`_public.publish`)."""
        where = _LATER.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(where, __name__), name)
        globals()[name] = value
        _publish(__name__, globals(), [name])
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LATER})
