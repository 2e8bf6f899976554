"""`Budget`: the limits every run is held to."""

from __future__ import annotations

from time import perf_counter, time
from typing import final

from pydantic import Field

from ._model import FrozenModel

__all__ = ["Budget", "Stopwatch", "time_detail"]


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
    """A run's own time: what earlier stretches spent plus this stretch so far.

    It also tells the time of a moment of this stretch from one `perf_counter()` reading
    (`at`): a cycle reads the clock once when it starts, and its trace turns the reading
    into a wall-clock time and a run time when it is built.
    """

    __slots__ = ("_before", "_started", "_wall")

    def __init__(self, before: float = 0.0) -> None:
        self._before = before
        self._wall = time()
        self._started = perf_counter()

    def elapsed(self) -> float:
        """Seconds the run has spent, a human's wait excluded."""
        return self._before + (perf_counter() - self._started)

    def at(self, reading: float, /) -> tuple[float, float]:
        """The wall clock (as `time.time()` gives it) and the run's own time at `reading`,
        a `perf_counter()` reading taken in this stretch.

        The wall clock is this stretch's start plus the time since, so a clock set back or
        forward while the run goes on does not reorder its cycles.
        """
        since = reading - self._started
        return self._wall + since, self._before + since


def time_detail(budget: Budget, elapsed: float) -> str:
    """The detail of a time-budget stop."""
    return f"max_seconds ({elapsed:.3f} > {budget.max_seconds})"
