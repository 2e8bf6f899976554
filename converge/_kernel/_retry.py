"""Retries: a failed or timed-out execution makes its suggestor a candidate again.

Without a retry, a suggestor whose `execute` failed changes no key, so nothing ever wakes it
again and the run can reach a fixed point having lost its work. A `RetryPolicy` (per engine,
or a suggestor's own `retry` attribute) gives it more attempts: after a failure in cycle `c`,
attempt `k + 1` is a candidate from cycle `c + backoff_cycles` on, and not before
`backoff_seconds` have passed; a run does not reach its fixed point while a retry is pending.
Attempts are numbered in the trace (`Execution.attempt`) and spend cycles, tokens and time
like any execution. `Retries` keeps the schedule of one run; `Retries.replayed` rebuilds it
from a trace, so a resumed or continued run keeps its attempts (a seconds backoff restarts
from the resume).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Final, Literal, final

from pydantic import Field

from .._core._model import FrozenModel
from .._core._suggestor import SuggestorId
from .._core._trace import CycleTrace, Execution

__all__ = ["NO_RETRY", "Retries", "RetryPolicy"]

RetryOutcome = Literal["failed", "timed_out"]
"""An execution outcome a policy may retry."""


@final
class RetryPolicy(FrozenModel, frozen=True):
    """How often, and when, a suggestor whose call failed is tried again.

    `RetryPolicy(attempts=3)` tries a failing suggestor up to 3 times in a row (the first
    call and 2 retries), each retry from the next cycle on. A success ends the streak.
    """

    attempts: int = Field(default=1, ge=1, le=1000)
    """Calls in a row a suggestor gets while it keeps failing (1: no retry)."""
    backoff_cycles: int = Field(default=1, ge=1, le=1000)
    """Cycles after a failure before the retry is a candidate (1: the next cycle)."""
    backoff_seconds: float = Field(default=0.0, ge=0.0, le=3600.0, allow_inf_nan=False)
    """Seconds after a failure before the retry is a candidate (the run waits if need be)."""
    retry_on: frozenset[RetryOutcome] = frozenset({"failed", "timed_out"})
    """Which outcomes are retried."""


NO_RETRY: Final = RetryPolicy()
"""The default: a failed call is recorded and not tried again."""


@final
@dataclass(slots=True)
class _Due:
    attempt: int
    """The number of the next attempt (2 for the first retry)."""
    cycle: int
    """The first cycle it may run in."""
    at: float
    """The first `perf_counter()` time it may run at."""


@final
class Retries:
    """The retry schedule of one run."""

    __slots__ = ("_default", "_due", "_policies", "_streak", "pending")

    def __init__(
        self, policies: Mapping[SuggestorId, RetryPolicy], default: RetryPolicy = NO_RETRY
    ) -> None:
        """`policies`: the suggestors with a policy of their own; `default`: everyone else's."""
        self._policies = policies
        self._default = default
        self._due: dict[SuggestorId, _Due] = {}
        self._streak: dict[SuggestorId, int] = {}
        self.pending = False
        """Whether any retry is scheduled (an attribute: the cycle reads it every time)."""

    @classmethod
    def replayed(
        cls,
        policies: Mapping[SuggestorId, RetryPolicy],
        default: RetryPolicy,
        cycles: Iterable[CycleTrace],
    ) -> Retries:
        """The schedule after the recorded `cycles` (seconds backoffs are due at once)."""
        retries = cls(policies, default)
        for cycle in cycles:
            retries.record(cycle.cycle, cycle.executions, now=float("-inf"))
        return retries

    def attempt(self, sid: SuggestorId) -> int:
        """The number the next call of `sid` has (1 outside a failure streak)."""
        return self._streak.get(sid, 0) + 1

    def due(self, cycle: int, now: float | None = None) -> list[SuggestorId]:
        """The suggestors whose retry may run in `cycle`, at `now`."""
        if not self._due:
            return []
        at = perf_counter() if now is None else now
        return [sid for sid, due in self._due.items() if due.cycle <= cycle and due.at <= at]

    def wait(self, cycle: int) -> float | None:
        """Seconds until the earliest retry that only time holds back in `cycle`, if any."""
        waits = [due.at for due in self._due.values() if due.cycle <= cycle]
        if not waits:
            return None
        return max(0.0, min(waits) - perf_counter())

    def numbered(self, executions: Sequence[Execution]) -> tuple[Execution, ...]:
        """`executions` with the attempt number of each call in a failure streak set."""
        streak = self._streak
        if not streak:
            return tuple(executions)
        return tuple(
            execution.model_copy(update={"attempt": streak[sid] + 1})
            if (sid := SuggestorId(execution.suggestor_id)) in streak
            else execution
            for execution in executions
        )

    def record(
        self, cycle: int, executions: Sequence[Execution], *, now: float | None = None
    ) -> None:
        """Update the schedule with a cycle's calls.

        A success ends a streak; a failure schedules the next attempt while the policy
        allows one.
        """
        at = perf_counter() if now is None else now
        for execution in executions:
            sid = SuggestorId(execution.suggestor_id)
            self._due.pop(sid, None)
            policy = self._policies.get(sid, self._default)
            if execution.outcome == "ok" or execution.outcome not in policy.retry_on:
                self._streak.pop(sid, None)
                continue
            made = self._streak.get(sid, 0) + 1
            if made >= policy.attempts:
                self._streak.pop(sid, None)  # the policy's attempts are spent
                continue
            self._streak[sid] = made
            due = _Due(made + 1, cycle + policy.backoff_cycles, at + policy.backoff_seconds)
            self._due[sid] = due
        self.pending = bool(self._due)
