"""What a batch gives back: a `StoredRun` per input stored, a `BatchFailure` per other.

Each stored run is reported as `converge run` would report it: its status and stop reason,
and how many calls failed without being made good or effects were rolled back, with the
first of them, so that a run that converged with failures never reads as a plain success.
"""

from __future__ import annotations

from typing import final

from .._core._model import FrozenModel
from .._core._record import RunRecord, failure_count
from .._core._result import ConvergeResult
from .._core._stop import RunStatus, StopReason
from .._core._trace import RunTrace

__all__ = ["BatchFailure", "BatchResult", "StoredRun", "as_stored", "first_failure", "of_result"]


@final
class BatchFailure(FrozenModel, frozen=True):
    """An input that did not end as a stored run, and why."""

    index: int
    """The input's position."""
    run_id: str
    """The run id it would have had."""
    error: str
    """`"ExceptionType: message"`."""


@final
class StoredRun(FrozenModel, frozen=True):
    """How one input of a batch ended: its stored run."""

    index: int
    """The input's position."""
    run_id: str
    """Its run id."""
    status: RunStatus
    """Its stored status."""
    stop_reason: str | None
    """Its stop reason (`None` unless finished or paused)."""
    merkle_root: str
    """Its context's Merkle root."""
    action: str
    """What this batch did with it: `"started"`, `"continued"` or `"kept"` (already stopped),
    or `"found"` (stored by an attempt of this batch whose task failed after)."""
    failures: int = 0
    """Its failed calls not made good and rolled-back effects (`RunRecord.failure_count`)."""
    first_failure: str | None = None
    """The first of them: `"suggestor (phase, cycle N, outcome): error"` or
    `"invariant (cycle N): reason"`; `None` without failures."""

    @property
    def with_failures(self) -> bool:
        """Whether it converged with failures (`converge run` would exit 9)."""
        return self.failures > 0 and self.stop_reason == "converged"

    @property
    def outcome(self) -> str:
        """Its stop reason (status while it has none), or `"converged_with_failures"`."""
        if self.with_failures:
            return "converged_with_failures"
        return self.stop_reason or self.status.value


@final
class BatchResult(FrozenModel, frozen=True):
    """A batch's outcome: a run id per input, counts, and the inputs that failed."""

    batch_id: str
    """The batch."""
    runs: tuple[StoredRun, ...]
    """Each stored run, in input order."""
    failures: tuple[BatchFailure, ...] = ()
    """Inputs that did not end as a stored run."""

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The run id of each stored input, in input order."""
        return tuple(run.run_id for run in self.runs)

    @property
    def complete(self) -> bool:
        """Whether every input ended as a stored run (whatever its stop reason)."""
        return not self.failures

    @property
    def with_failures(self) -> tuple[StoredRun, ...]:
        """The stored runs that converged with failed calls or rolled-back effects."""
        return tuple(run for run in self.runs if run.with_failures)

    @property
    def ok(self) -> bool:
        """Whether every input ended as a stored run and none converged with failures (runs
        that stopped for another reason, a budget or a gate, are in `counts`)."""
        return self.complete and not self.with_failures

    def counts(self) -> dict[str, int]:
        """How many stored runs ended with each outcome: the stop reason (status when not
        stopped), with `"converged_with_failures"` apart from `"converged"`."""
        found: dict[str, int] = {}
        for run in self.runs:
            found[run.outcome] = found.get(run.outcome, 0) + 1
        return dict(sorted(found.items()))


def of_result(result: ConvergeResult, index: int, action: str) -> StoredRun:
    """The stored run of a result this worker just saved (no need to read it back)."""
    stop = result.stop_reason
    paused = stop is StopReason.AWAITING_HUMAN
    return StoredRun(
        index=index,
        run_id=result.run_id,
        status=RunStatus.PAUSED if paused else RunStatus.FINISHED,
        stop_reason=stop.value,
        merkle_root=result.integrity.merkle_root,
        action=action,
        failures=failure_count(result.trace),
        first_failure=first_failure(result.trace),
    )


def as_stored(record: RunRecord, index: int, action: str) -> StoredRun:
    stop = record.stop_reason
    return StoredRun(
        index=index,
        run_id=record.run_id,
        status=record.status,
        stop_reason=None if stop is None else stop.value,
        merkle_root=record.integrity.merkle_root,
        action=action,
        failures=record.failure_count,
        first_failure=first_failure(record.trace),
    )


def first_failure(trace: RunTrace) -> str | None:
    """The first failed call not made good, else the first rolled-back effect, as one line."""
    for failure in trace.failures():
        cycle = next((c.cycle for c in trace.cycles if failure in c.executions), 0)
        return (
            f"{failure.suggestor} ({failure.phase}, cycle {cycle}, {failure.outcome}): "
            f"{failure.error or 'no error text'}"
        )
    for violation in trace.rolled_back():
        return f"{violation.invariant} (cycle {violation.cycle}): {violation.reason}"
    return None
