"""`RunConfig`: the engine settings a run reads, frozen when the run starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import final

from .._core._budget import Budget
from .._core._events import Observer
from .._core._hitl import HitlPolicy
from ._executor import ErrorMode
from ._gate import PromotionPolicy
from ._merge import ConflictMode
from ._retry import NO_RETRY, RetryPolicy

__all__ = ["RunConfig"]


@final
@dataclass(frozen=True, slots=True)
class RunConfig:
    """The engine settings a run reads."""

    budget: Budget
    policy: PromotionPolicy
    on_conflict: ConflictMode
    on_suggestor_error: ErrorMode
    max_concurrency: int | None
    suggestor_timeout: float | None
    hitl: HitlPolicy | None
    clock: Callable[[], datetime]
    signing_key: bytes | None
    observers: tuple[Observer, ...] = ()
    record_effects: bool = False
    retry: RetryPolicy = NO_RETRY
