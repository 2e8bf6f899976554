"""The run trace: what ran, what was promoted, what was refused, cycle by cycle."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, final

from pydantic import Field, JsonValue

from ._effect import AgentEffect
from ._hitl import GateDecision
from ._invariant import InvariantClass, Violation
from ._key import KeyField
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._stop import StopReason

__all__ = ["Continuation", "CycleTrace", "Execution", "Outcome", "Rejection", "RunTrace"]

Outcome = Literal["ok", "failed", "timed_out"]
"""How an execution ended."""


@final
class Rejection(FrozenModel, frozen=True):
    """A proposal the engine refused, and why. Rejections never stop a run."""

    proposal: ProposedFact
    """The refused proposal, as emitted."""
    suggestor: str
    """The name of the suggestor that emitted it (`"input"` for inputs)."""
    cycle: int
    """The cycle of the merge (0 for inputs)."""
    reason: str
    """Why it was refused."""


@final
class Execution(FrozenModel, frozen=True):
    """One call of a suggestor's `accepts` (when it failed) or `execute`."""

    suggestor: str
    """The suggestor's name."""
    suggestor_id: int
    """Its registration id."""
    outcome: Outcome
    """`"ok"`, `"failed"` (it raised or returned the wrong type) or `"timed_out"`."""
    duration_ms: float
    """Wall time of `execute` in milliseconds (0 for a failed `accepts`, which is not timed)."""
    proposals: int = 0
    """How many proposals its effect held."""
    tokens: int = 0
    """Model tokens its effect reported."""
    error: str | None = None
    """`"ExceptionType: message"` for a failure or timeout."""
    phase: Literal["accepts", "execute"] = "execute"
    """Which call this records: `accepts` appears only when it failed."""
    attempt: int = Field(default=1, ge=1, exclude_if=lambda v: v == 1)
    """Which call in a row of failures this is (2 for the first retry; see `RetryPolicy`).
    Left out of JSON when 1."""
    tokens_unknown: bool = Field(default=False, exclude_if=lambda v: not v)
    """True when a failed call may have spent tokens it could not count (a model call that
    timed out): `tokens` is then a lower bound (what it could count). The engine sets it when
    the exception's `tokens` is `None`, or its `tokens_unknown` is true. Left out of JSON when
    false."""
    metadata: JsonValue = Field(default=None, exclude_if=lambda v: not v)
    """The effect's `metadata` (or a failure's `metadata` attribute): what the suggestor
    recorded about the call. Left out of JSON when empty."""
    traceback: str | None = None
    """The formatted traceback of a failure."""
    effect: AgentEffect | None = None
    """The effect itself, when the engine records effects (`record_effects=True`)."""


@final
class CycleTrace(FrozenModel, frozen=True):
    """Everything that happened in one cycle."""

    cycle: int
    """The cycle number, from 1."""
    dirty: tuple[KeyField, ...]
    """Keys that gained facts in the previous cycle (or the inputs), in key order."""
    eligible: tuple[str, ...]
    """Names of the suggestors that ran, in registration order."""
    executions: tuple[Execution, ...]
    """One per call, in registration order."""
    promoted: tuple[str, ...]
    """`"key/id"` of every fact promoted, in merge order."""
    rejected: tuple[Rejection, ...] = ()
    """Proposals refused by the gate or as conflicts."""
    held: tuple[str, ...] = ()
    """Gate ids of proposals held for a human."""
    violations: tuple[Violation, ...] = ()
    """Invariant violations found in this cycle."""
    merged: bool = True
    """False when the time budget cancelled the cycle: none of its effects were merged."""
    started_at: datetime | None = Field(default=None, exclude_if=lambda v: v is None)
    """When the cycle started, UTC (`None` in records written before converge recorded it):
    the wall clock when this stretch of the run started plus the monotonic time since, so a
    clock set back or forward during a run does not reorder its cycles."""
    at_seconds: float | None = Field(default=None, ge=0.0, exclude_if=lambda v: v is None)
    """The run's own time when the cycle started, in seconds: a human's wait is not counted,
    so the cycles of a paused and resumed run share one time axis."""


@final
class Continuation(FrozenModel, frozen=True):
    """Where an interrupted run was picked up again."""

    after_cycle: int
    """The last cycle saved before the interruption; the run went on from the next one."""
    cause: Literal["cancelled", "lost"]
    """`"cancelled"`: its caller cancelled it; `"lost"`: its process stopped saving (killed,
    crashed) and its lease ran out."""


@final
class RunTimes(FrozenModel, frozen=True):
    """When a run started and ended (UTC wall clock), and how long it ran (its own time);
    `None` for what an older record did not keep."""

    started: datetime | None = None
    """When its first cycle started."""
    ended: datetime | None = None
    """When its last cycle's slowest call ended."""
    seconds: float | None = None
    """Its own time, to the end of its last cycle's slowest call."""


@final
class RunTrace(FrozenModel, frozen=True):
    """The JSON-serialisable record of a run."""

    run_id: str
    """The run's id."""
    inputs: tuple[ProposedFact, ...]
    """The inputs as given, merged at cycle 0."""
    initial_root: str
    """Merkle root of the starting context."""
    cycles: tuple[CycleTrace, ...] = Field(default=())
    """One entry per cycle started, from cycle 1."""
    decisions: tuple[GateDecision, ...] = ()
    """Human (and timeout) decisions applied on resume, in order."""
    input_violations: tuple[Violation, ...] = ()
    """Structural violations that rolled the inputs back."""
    stop_reason: StopReason | None = None
    """How the run (so far) ended."""
    detail: str = ""
    """The stop detail."""
    final_root: str | None = None
    """The Merkle root of the context it ended with; `Engine.replay` must reproduce it."""
    continuations: tuple[Continuation, ...] = Field(default=(), exclude_if=lambda v: not v)
    """Where the run was interrupted and continued, in order (left out of JSON when none)."""

    def failures(self) -> tuple[Execution, ...]:
        """The calls that failed and were not made good: each suggestor whose last recorded
        call (`accepts` or `execute`) failed or timed out, in the order of those calls.

        A failure that a retry (`RetryPolicy`) later made good is in `cycles`, not here.
        """
        last: dict[int, Execution] = {}
        for cycle in self.cycles:
            for execution in cycle.executions:
                last.pop(execution.suggestor_id, None)  # keep the order of the last calls
                last[execution.suggestor_id] = execution
        return tuple(execution for execution in last.values() if execution.outcome != "ok")

    def times(self) -> RunTimes:
        """The run's times, from its cycles."""
        cycles = self.cycles
        if not cycles:
            return RunTimes()
        first, last = cycles[0], cycles[-1]
        slowest = max((execution.duration_ms for execution in last.executions), default=0.0)
        started = last.started_at
        return RunTimes(
            started=first.started_at,
            ended=None if started is None else started + timedelta(milliseconds=slowest),
            seconds=None if last.at_seconds is None else last.at_seconds + slowest / 1000,
        )

    def rolled_back(self) -> tuple[Violation, ...]:
        """Structural violations: each rolled back a suggestor's effect (or the inputs)."""
        found = (*self.input_violations, *(v for c in self.cycles for v in c.violations))
        return tuple(v for v in found if v.invariant_class is InvariantClass.STRUCTURAL)
