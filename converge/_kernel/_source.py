"""Where a cycle's effects come from: the suggestors themselves, or a recorded trace.

The run loop (`_run.RunLoop`) has one cycle, fed by an `EffectSource`: `_live.LiveEffects`
checks `accepts` and executes the eligible suggestors; `_replay.RecordedEffects` reads the
effects a trace recorded. Everything after (merge, budgets, gates, invariants, the trace) is
the same code for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, final

from .._core._context import ContextSnapshot
from .._core._effect import AgentEffect
from .._core._hitl import GateDecision, GateRequest
from .._core._key import AnyKey
from .._core._stop import StopReason
from .._core._trace import Execution
from ._calls import Returned
from ._registry import Registration

__all__ = ["Batch", "EffectSource", "End"]


@final
@dataclass(slots=True)
class Batch:
    """One cycle's work, ready to merge."""

    eligible: tuple[Registration, ...]
    """The suggestors that executed (their `accepts` said yes), in id order."""
    calls: Sequence[Execution | Returned]
    """Every call recorded for the trace, failed `accepts` included, in id order: its
    `Execution`, or what a call that returned an effect left for it (`Returned`), built
    into its `Execution` when something reads it (`_calls.records`)."""
    effects: tuple[tuple[Registration, AgentEffect], ...]
    """The effects to merge, in id order."""
    tokens: int
    """Tokens the cycle spent, failed and cancelled calls included."""
    cancelled: tuple[StopReason, str] | None
    """Set when the time budget cancelled the cycle: nothing merges, the run stops so."""
    failed: bool
    """Whether a call failed or timed out (an execution's outcome is not `"ok"`); no default,
    so a source cannot leave a failure unsaid."""


@final
@dataclass(frozen=True, slots=True)
class End:
    """No further cycle: the run ends at `cycle`, at a fixed point when `reason` is `None`."""

    reason: StopReason | None
    detail: str
    cycle: int


class EffectSource(Protocol):
    """What one run's cycles read their effects from."""

    def end(self, cycle: int, /) -> End | None:
        """Whether the run ends before `cycle` starts."""
        ...

    async def produce(
        self, cycle: int, dirty: frozenset[AnyKey], snapshot: ContextSnapshot, /
    ) -> Batch:
        """The effects of `cycle`, from the suggestors whose keys in `dirty` changed."""
        ...

    def budget_stop(self, facts: int, tokens: int, /) -> tuple[StopReason, str] | None:
        """The budget the run has exceeded after a merge, if any."""
        ...

    def decisions(self, held: Sequence[GateRequest], /) -> Sequence[GateDecision] | None:
        """Decisions for every held gate, or `None` to pause for a human."""
        ...

    def retrying(self, cycle: int, /) -> bool:
        """Whether a cycle after `cycle` must run although nothing changed (a retry is due)."""
        ...
