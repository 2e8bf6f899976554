"""`ConvergeResult` and `StopReason`: how a run ended and everything it produced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from ._checkpoint import Checkpoint, Lineage
from ._context import ContextSnapshot
from ._error import ConvergeError
from ._fact import Fact
from ._hitl import GateRequest
from ._integrity import IntegrityProof
from ._invariant import Violation
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._shortfall import Shortfall, invalid_proposals
from ._stop import StopReason
from ._trace import Execution, Rejection, RunTrace

__all__ = [
    "AwaitingHumanError",
    "BudgetExhaustedError",
    "Conflict",
    "ConflictError",
    "ConvergeResult",
    "InvariantViolationError",
    "RunError",
    "StopReason",
    "SuggestorFailuresError",
]


@final
class Conflict(FrozenModel, frozen=True):
    """A proposal with the key and id of an existing fact but different content or payload."""

    proposal: ProposedFact
    """The later, conflicting proposal."""
    suggestor: str
    """The suggestor that emitted it."""
    cycle: int
    """The cycle of the merge (0 for inputs)."""
    existing_provenance: str
    """The provenance of the fact already in the context."""

    def describe(self) -> str:
        """One line naming the fact, the suggestor and the cycle."""
        return (
            f"{self.proposal.ref}: {self.suggestor!r} proposed different content in cycle "
            f"{self.cycle} than the existing fact from {self.existing_provenance!r}"
        )


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


class SuggestorFailuresError(RunError):
    """The run converged, but with failures: calls that failed and were not made good,
    invalid proposals, or effects a structural invariant rolled back (`ConvergeResult.ok`)."""

    @property
    def failures(self) -> tuple[Execution, ...]:
        """The calls that failed and were not made good (`result.failures`)."""
        return self.result.failures

    @property
    def invalid_proposals(self) -> tuple[Rejection, ...]:
        """The rejections of broken proposals (`result.invalid_proposals`)."""
        return self.result.invalid_proposals

    @property
    def rolled_back(self) -> tuple[Violation, ...]:
        """The structural violations that rolled effects back (`result.rolled_back`)."""
        return self.result.rolled_back


_ERRORS: dict[StopReason, type[RunError]] = {
    StopReason.CYCLE_BUDGET_EXHAUSTED: BudgetExhaustedError,
    StopReason.FACT_BUDGET_EXHAUSTED: BudgetExhaustedError,
    StopReason.TOKEN_BUDGET_EXHAUSTED: BudgetExhaustedError,
    StopReason.TIME_BUDGET_EXHAUSTED: BudgetExhaustedError,
    StopReason.INVARIANT_VIOLATED: InvariantViolationError,
    StopReason.CONFLICT: ConflictError,
    StopReason.AWAITING_HUMAN: AwaitingHumanError,
}


@final
@dataclass(frozen=True, slots=True, repr=False, eq=False)
class ConvergeResult:
    """How a run ended, with its context, proof and trace. A stopped run keeps its partial work."""

    stop_reason: StopReason
    """Why the run stopped."""
    detail: str
    """A short explanation, such as `"max_cycles (3)"` or `"max_facts (30 > 25)"`."""
    cycles: int
    """Cycles started (0 when the inputs alone stopped the run)."""
    context: ContextSnapshot
    """The last consistent snapshot."""
    _integrity: IntegrityProof | None
    """The proof of `context`, or `None` until `integrity` is first read."""
    _trace: RunTrace | Callable[[], RunTrace]
    """The trace, or what builds it on the first read of `trace`."""
    rejections: tuple[Rejection, ...]
    """Every proposal refused in the run, inputs included, in merge order."""
    tokens: int
    """Model tokens the suggestors reported."""
    run_id: str
    """The run's id."""
    conflict: Conflict | None = None
    """The conflict that stopped the run, for `StopReason.CONFLICT`."""
    pending: tuple[GateRequest, ...] = ()
    """Proposals awaiting a human, for `StopReason.AWAITING_HUMAN`."""
    checkpoint: Checkpoint | None = None
    """What `Engine.resume` needs, for `StopReason.AWAITING_HUMAN`."""
    lineage: Lineage | None = None
    """Where a forked run branched off its parent (`Engine.fork`); `None` for any other."""
    _saved: object = None
    """The record the engine saved of this run (set once, by the engine, after the save;
    `RunRecord.saved` reads it)."""
    _facts: object = None
    """The records of `context`'s facts as the run's end checked them, when the engine
    saves the record whole (`_kernel._run.RunLoop`); `None` otherwise."""

    @property
    def integrity(self) -> IntegrityProof:
        """The Merkle root, clock and fact count of `context`.

        Built on the first read and kept, from the leaf digests the engine computed when it
        promoted each fact (the context cannot change, so any read gives the same proof): a
        run whose proof nobody reads never hashes its Merkle tree. A run that narrates at
        info level, is saved to a store or pauses builds it at its end. Two threads reading
        it at once for the first time may each build one (equal).
        """
        proof = self._integrity
        if proof is None:
            proof = IntegrityProof.of(self.context)
            object.__setattr__(self, "_integrity", proof)
        return proof

    @property
    def trace(self) -> RunTrace:
        """What happened, cycle by cycle.

        Built on the first read and kept: a run whose trace nobody reads never builds it.
        Two threads reading it at once for the first time may each build one (equal).
        """
        trace = self._trace
        if not isinstance(trace, RunTrace):
            trace = trace()
            object.__setattr__(self, "_trace", trace)
        return trace

    @property
    def violations(self) -> tuple[Violation, ...]:
        """Every invariant violation recorded in the run, in the order found."""
        trace = self.trace
        return trace.input_violations + tuple(v for c in trace.cycles for v in c.violations)

    @property
    def converged(self) -> bool:
        """True only for `StopReason.CONVERGED`."""
        return self.stop_reason is StopReason.CONVERGED

    @property
    def failures(self) -> tuple[Execution, ...]:
        """Calls that failed or timed out and were not made good by a retry (see
        `RunTrace.failures`): a run can converge with work missing, and this says which."""
        return self.trace.failures()

    @property
    def rolled_back(self) -> tuple[Violation, ...]:
        """Structural violations: effects (or inputs) the engine rolled back."""
        return self.trace.rolled_back()

    @property
    def invalid_proposals(self) -> tuple[Rejection, ...]:
        """Rejections of broken proposals, in `rejections` order: a payload that does not fit
        its typed key's model, a proposal that does not validate (a key nobody declared, a
        field of the wrong type) or cannot be hashed. A proposal the policy, a conflict or a
        human turned down is not among them."""
        return invalid_proposals(self.rejections)

    @property
    def ok(self) -> bool:
        """Converged, with no failed call left, no invalid proposal and nothing rolled back:
        what `raise_for_status()` returns quietly for, and the command exits 0 for."""
        return self.converged and not self.shortfall()

    @property
    def clean(self) -> bool:
        """The same as `ok` (its earlier name)."""
        return self.ok

    def shortfall(self) -> Shortfall:
        """What the run fell short by: its failures, invalid proposals and rollbacks."""
        return Shortfall.of(self.trace, self.rejections)

    def __repr__(self) -> str:
        """Short, and without the proof's root: reading it builds the proof (asyncio puts a
        task's result in the task's repr, which Python 3.11's `asyncio.run` formats once)."""
        return (
            f"ConvergeResult(stop_reason={self.stop_reason.value!r}, cycles={self.cycles}, "
            f"facts={len(self.context)}, run_id={self.run_id[:12]!r})"
        )

    def raise_for_status(self, *, allow_failures: bool = False) -> ConvergeResult:
        """Return the result if the run converged without failures (`ok`); raise otherwise.

        Args:
            allow_failures: Return a run that converged with failures too (as the command's
                `--allow-failures`).

        Raises:
            SuggestorFailuresError: The run converged with calls that failed and were not
                made good, invalid proposals, or rolled-back effects (unless
                `allow_failures`).
            BudgetExhaustedError: A cycle, fact, token or time budget ran out.
            InvariantViolationError: An invariant was violated at the end.
            ConflictError: A proposal conflicted with an existing fact.
            AwaitingHumanError: The run paused for human decisions.
        """
        if self.converged:
            if allow_failures:
                return self
            shortfall = self.shortfall()
            if not shortfall:
                return self
            raise SuggestorFailuresError(
                f"run {self.run_id} converged with failures: {shortfall.describe()}",
                result=self,
            )
        error = _ERRORS[self.stop_reason]
        raise error(
            f"run {self.run_id} stopped: {self.stop_reason.value}: {self.detail}", result=self
        )
