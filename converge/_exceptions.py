"""Everything converge raises.

```
ConvergeError                        root: `except ConvergeError` catches everything converge raises
├── ConfigurationError (ValueError)  set up wrongly; raised before the first cycle
│   ├── InvalidResumeError           decisions that do not fit a checkpoint's pending gates
│   ├── InvalidCheckpointError       a checkpoint that is tampered, unsigned or foreign
│   └── ReplayError                  a trace that does not replay to its recorded root
└── RunError                         raised by `ConvergeResult.raise_for_status()`; has `.result`
    ├── BudgetExhaustedError         `.result.stop_reason` says which budget
    ├── InvariantViolationError      `.violations`
    ├── ConflictError                `.existing`, `.proposed`
    └── AwaitingHumanError           `.pending`
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._fact import Fact
    from ._hitl import GateRequest
    from ._invariant import Violation
    from ._proposal import ProposedFact
    from ._result import ConvergeResult

__all__ = [
    "AwaitingHumanError",
    "BudgetExhaustedError",
    "ConfigurationError",
    "ConflictError",
    "ConvergeError",
    "InvalidCheckpointError",
    "InvalidResumeError",
    "InvariantViolationError",
    "ReplayError",
    "RunError",
]


class ConvergeError(Exception):
    """The root of every error converge raises."""


class ConfigurationError(ConvergeError, ValueError):
    """The engine or a registration is set up wrongly; raised before anything runs."""


class InvalidResumeError(ConfigurationError):
    """`Engine.resume` got decisions or registrations that do not fit the checkpoint."""


class InvalidCheckpointError(ConfigurationError):
    """A checkpoint failed verification: a changed fact or root, a missing or bad signature."""


class ReplayError(ConfigurationError):
    """A trace cannot be replayed, or replaying it does not reproduce its recorded root."""


class RunError(ConvergeError):
    """A run that did not converge, raised by `ConvergeResult.raise_for_status()`."""

    result: ConvergeResult
    """The run's result, with its partial context."""

    def __init__(self, message: str, *, result: ConvergeResult) -> None:
        super().__init__(message)
        self.result = result


class BudgetExhaustedError(RunError):
    """A budget ran out; `result.stop_reason` says which."""


class InvariantViolationError(RunError):
    """An invariant was still violated at the end of the run."""

    @property
    def violations(self) -> tuple[Violation, ...]:
        """Every violation recorded in the run, in the order found."""
        return self.result.violations


class ConflictError(RunError):
    """A suggestor proposed different content for a fact that already exists."""

    @property
    def proposed(self) -> ProposedFact | None:
        """The conflicting proposal."""
        conflict = self.result.conflict
        return None if conflict is None else conflict.proposal

    @property
    def existing(self) -> Fact | None:
        """The fact it conflicts with, as it stands in the result's context."""
        conflict = self.result.conflict
        if conflict is None:
            return None
        return self.result.context.find(conflict.proposal.key, conflict.proposal.id)


class AwaitingHumanError(RunError):
    """The run paused for human decisions."""

    @property
    def pending(self) -> tuple[GateRequest, ...]:
        """The gates awaiting decisions."""
        return self.result.pending
