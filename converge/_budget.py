"""`Budget`: the limits every run is held to."""

from __future__ import annotations

from typing import final

from pydantic import Field

from ._model import FrozenModel

__all__ = ["Budget"]


@final
class Budget(FrozenModel, frozen=True):
    """Limits on a run. All four are enforced; `None` means unlimited.

    A run that reaches one stops with the matching `StopReason` and keeps its partial context.
    """

    max_cycles: int = Field(default=100, ge=1)
    """Cycles a run may start; cycle `max_cycles + 1` stops it with `CYCLE_BUDGET_EXHAUSTED`."""
    max_facts: int = Field(default=10_000, ge=0)
    """Facts the context may hold; more after a merge stops with `FACT_BUDGET_EXHAUSTED`."""
    max_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=False)
    """The run's own time in seconds, a human's wait excluded; in-flight work is cancelled."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Model tokens suggestors may report; more stops with `TOKEN_BUDGET_EXHAUSTED`."""
