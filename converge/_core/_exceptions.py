"""Everything converge raises.

```
ConvergeError                        root: `except ConvergeError` catches everything converge raises
├── ConfigurationError (ValueError)  set up wrongly; raised before the first cycle
│   ├── InvalidResumeError           decisions that do not fit a checkpoint's pending gates
│   ├── InvalidCheckpointError       a checkpoint that is tampered, unsigned or foreign
│   └── ReplayError                  a trace that does not replay to its recorded root
├── SuggestorExitError               a suggestor raised `SystemExit`: the run stopped there
├── WorkerError (RuntimeError)       an isolated suggestor's call failed in its worker process
├── RunError                         raised by `ConvergeResult.raise_for_status()`; has `.result`
│   ├── BudgetExhaustedError         `.result.stop_reason` says which budget
│   ├── InvariantViolationError      `.violations`
│   ├── ConflictError                `.existing`, `.proposed`
│   ├── AwaitingHumanError           `.pending`
│   └── SuggestorFailuresError       converged, with failed calls or invalid proposals
└── StoreError                       a run store could not save or load; `.result` if saving failed
    ├── StaleRecordError             someone saved the run since it was read (`.current`)
    └── RunNotFoundError (KeyError)  no run with that id is stored
```

`ConvergeError` is defined in `_error`, the `RunError` family beside `ConvergeResult` in
`_result` (each carries a result, and `raise_for_status` raises them), and
`SuggestorExitError` in `_error` too, so that no module imports in a circle;
this module defines the rest and gathers them all.
"""

from __future__ import annotations

from pydantic import JsonValue

from ._error import ConfigurationError, ConvergeError, SuggestorExitError
from ._result import (
    AwaitingHumanError,
    BudgetExhaustedError,
    ConflictError,
    ConvergeResult,
    InvariantViolationError,
    RunError,
    SuggestorFailuresError,
)

__all__ = [
    "AwaitingHumanError",
    "BudgetExhaustedError",
    "ConfigurationError",
    "ConflictError",
    "ConvergeError",
    "ForkError",
    "InvalidCheckpointError",
    "InvalidResumeError",
    "InvariantViolationError",
    "ReplayError",
    "RunError",
    "RunNotFoundError",
    "StaleRecordError",
    "StoreError",
    "SuggestorExitError",
    "SuggestorFailuresError",
    "WorkerError",
]


class InvalidResumeError(ConfigurationError):
    """`Engine.resume` got decisions or registrations that do not fit the checkpoint."""


class InvalidCheckpointError(ConfigurationError):
    """A checkpoint failed verification: a changed fact or root, a missing or bad signature."""


class ReplayError(ConfigurationError):
    """A trace cannot be replayed, or replaying it does not reproduce its recorded root."""


class ForkError(ConfigurationError):
    """A stored run cannot be forked as asked: no such cycle, no such fact to retract, an
    input that does not fit its key, or a parent record whose facts do not verify."""


class StoreError(ConvergeError):
    """A run store could not save or load; `result` holds the run when a save failed."""

    result: ConvergeResult | None
    """The run that could not be saved, so nothing is lost."""

    def __init__(self, message: str, *, result: ConvergeResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class StaleRecordError(StoreError):
    """Someone saved the run since it was read: this save (or resume) would lose their work."""

    run_id: str
    """The run."""
    expected: int
    """The version the save was based on."""
    current: int | None
    """The version stored now (`None` if the run is gone)."""

    def __init__(self, run_id: str, expected: int, current: int | None) -> None:
        now = "no longer stored" if current is None else f"now at version {current}"
        super().__init__(
            f"run {run_id} was saved by someone else since version {expected} ({now}); "
            "nothing was saved"
        )
        self.run_id = run_id
        self.expected = expected
        self.current = current


class RunNotFoundError(StoreError, KeyError):
    """No run with that id is stored."""

    def __str__(self) -> str:
        return str(self.args[0])


class WorkerError(ConvergeError, RuntimeError):
    """An isolated suggestor's call failed in its worker process; the run records it as
    that suggestor's failure and goes on.

    The message names the suggestor, the cycle and the worker's pid, and says what
    happened: the suggestor raised, the worker died (its exit status or signal), or it
    answered with something that is not a valid reply.
    """

    suggestor: str
    """The isolated suggestor's name."""
    cycle: int
    """The cycle of the call."""
    pid: int | None
    """The worker's process id, when one was running."""
    reason: str
    """`"raised"` (the suggestor raised), `"died"` (the worker ended mid-call),
    `"garbage"` (its reply was not a valid effect of this suggestor) or `"timeout"` (no
    answer within the pool's `timeout`)."""
    metadata: dict[str, JsonValue]
    """`{"worker_pid": ..., "kill_reason": ...}`, copied to the call's
    `Execution.metadata` (no `kill_reason` when the worker lives on)."""

    def __init__(
        self,
        message: str,
        *,
        suggestor: str,
        cycle: int,
        pid: int | None,
        reason: str,
        kill_reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.suggestor = suggestor
        self.cycle = cycle
        self.pid = pid
        self.reason = reason
        self.metadata = {"worker_pid": pid}
        if kill_reason is not None:
            self.metadata["kill_reason"] = kill_reason
