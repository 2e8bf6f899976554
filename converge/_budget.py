"""`Budget`: the limits every run is held to."""

from __future__ import annotations

from time import perf_counter
from typing import final

from pydantic import Field

from ._model import FrozenModel
from ._stop import StopReason

__all__ = ["Budget", "Stopwatch", "budget_stop", "time_detail"]


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


@final
class Stopwatch:
    """A run's own time: what earlier stretches spent plus this stretch so far."""

    __slots__ = ("_before", "_started")

    def __init__(self, before: float = 0.0) -> None:
        self._before = before
        self._started = perf_counter()

    def elapsed(self) -> float:
        """Seconds the run has spent, a human's wait excluded."""
        return self._before + (perf_counter() - self._started)


def budget_stop(
    budget: Budget, *, facts: int, tokens: int, elapsed: float
) -> tuple[StopReason, str] | None:
    """The fact, token or time budget a run has exceeded, with its detail; `None` if none."""
    if facts > budget.max_facts:
        return StopReason.FACT_BUDGET_EXHAUSTED, f"max_facts ({facts} > {budget.max_facts})"
    if budget.max_tokens is not None and tokens > budget.max_tokens:
        return StopReason.TOKEN_BUDGET_EXHAUSTED, f"max_tokens ({tokens} > {budget.max_tokens})"
    if budget.max_seconds is not None and elapsed > budget.max_seconds:
        return StopReason.TIME_BUDGET_EXHAUSTED, time_detail(budget, elapsed)
    return None


def time_detail(budget: Budget, elapsed: float) -> str:
    """The detail of a time-budget stop."""
    return f"max_seconds ({elapsed:.3f} > {budget.max_seconds})"
