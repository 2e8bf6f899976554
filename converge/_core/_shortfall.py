"""What a run fell short by: the one definition of "converged with failures".

A run can reach its fixed point with work missing: calls that failed and were not made good,
effects a structural invariant rolled back, proposals that were broken rather than refused by
policy (a payload that does not fit its typed key's model, a proposal that does not validate,
such as one for a key nobody declared, or one that cannot be hashed). `ConvergeResult.ok`
and `raise_for_status()`, the command's exit status 9 and the HTML report's badge all read
this one `Shortfall`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from ._invariant import Violation
from ._trace import Execution, Rejection, RunTrace

__all__ = ["INVALID_REASONS", "Shortfall", "cycle_of", "invalid", "invalid_proposals"]

INVALID_REASONS: Final = (
    "invalid proposal: ",
    "payload does not fit ",
    "cannot be hashed as canonical JSON",
    "the effect's proposals cannot be read",
    "could not be decided",
)
"""How the engine's reasons for refusing a broken proposal begin (the gate and the merge
write them; a policy's refusal, a conflict or a human's rejection begins otherwise)."""


def invalid(rejection: Rejection) -> bool:
    """Whether `rejection` refused a broken proposal, not one the policy turned down."""
    return rejection.reason.startswith(INVALID_REASONS)


def invalid_proposals(rejections: Sequence[Rejection]) -> tuple[Rejection, ...]:
    """The rejections of broken proposals among `rejections`, in order."""
    return tuple(rejection for rejection in rejections if invalid(rejection))


def cycle_of(trace: RunTrace, execution: Execution) -> int:
    """The cycle `execution` was recorded in (the last such; 0 if it is in none)."""
    for cycle in reversed(trace.cycles):
        if execution in cycle.executions:
            return cycle.cycle
    return 0


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


@final
@dataclass(frozen=True, slots=True)
class Shortfall:
    """The failures a run still has at its end; false when it has none."""

    failures: tuple[Execution, ...]
    """Calls that failed or timed out and were not made good (`RunTrace.failures`)."""
    rolled_back: tuple[Violation, ...]
    """Structural violations, each of which rolled an effect back (`RunTrace.rolled_back`)."""
    invalid: tuple[Rejection, ...]
    """Rejections of broken proposals (`invalid`)."""
    trace: RunTrace
    """The trace they come from."""

    @classmethod
    def of(cls, trace: RunTrace, rejections: Sequence[Rejection]) -> Shortfall:
        """What the run with `trace` and `rejections` fell short by."""
        return cls(trace.failures(), trace.rolled_back(), invalid_proposals(rejections), trace)

    def __bool__(self) -> bool:
        return bool(self.failures or self.rolled_back or self.invalid)

    def describe(self) -> str:
        """One line: how many of each, and the first of each."""
        parts: list[str] = []
        if self.failures:
            first = self.failures[0]
            parts.append(
                f"{_count(len(self.failures), 'call', 'calls')} failed and not made good "
                f"(first: {first.suggestor!r}, {first.phase}, cycle "
                f"{cycle_of(self.trace, first)}: {_first_line(first.error or first.outcome)})"
            )
        if self.invalid:
            first = self.invalid[0]
            parts.append(
                f"{_count(len(self.invalid), 'invalid proposal', 'invalid proposals')} "
                f"(first: {first.proposal.ref} from {first.suggestor!r}, cycle {first.cycle}: "
                f"{_first_line(first.reason)})"
            )
        if self.rolled_back:
            first = self.rolled_back[0]
            parts.append(
                f"{_count(len(self.rolled_back), 'effect', 'effects')} rolled back (first: "
                f"{first.invariant!r}, cycle {first.cycle}: {_first_line(first.reason)})"
            )
        return "; ".join(parts)
