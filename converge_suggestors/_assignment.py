"""`AssignmentSuggestor` and `AssignmentPack`: optimal assignment with SciPy (extra `optimize`).

The solver is `scipy.optimize.linear_sum_assignment`, installed with the `optimize` extra
(`pip install "converge-engine[optimize]"`) and imported when a suggestor or pack is built. A large
cost matrix stays out of the context: it is added to the suggestor (`add_costs`), which keeps a
read-only float64 copy under a SHA-256 content digest, and the problem fact names it by that
digest (`costs_digest`), so the engine validates and hashes 71 characters, not the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal, final

import anyio.to_thread
from pydantic import ValidationError

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    GateVerdict,
    InvariantResult,
    KeyLike,
    ProposedFact,
    key_named,
)

from ._assignment_model import (
    AssignmentPair,
    AssignmentPlan,
    AssignmentProblem,
    CostMatrices,
    load_solver,
    solve_problem,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = [
    "AssignmentPack",
    "AssignmentPair",
    "AssignmentPlan",
    "AssignmentProblem",
    "AssignmentSuggestor",
]

_SHOWN_PAIRS: Final = 10


def _describe(plan: AssignmentPlan) -> str:
    shown = ", ".join(f"{pair.row}->{pair.column}" for pair in plan.pairs[:_SHOWN_PAIRS])
    more = len(plan.pairs) - _SHOWN_PAIRS
    if more > 0:
        shown += f" and {more} more"
    return f"assign {shown or 'nothing'} (total cost {plan.total_cost:g})"


def _validation_summary(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'payload'}: {e['msg']}"
        for e in error.errors()
    )


@final
class AssignmentSuggestor:
    """Solves each [`AssignmentProblem`][converge_suggestors.AssignmentProblem] fact, once.

    For each fact of `input_key` it proposes to `STRATEGIES` a fact `"{name}:{fact id}"`
    whose payload is the optimal [`AssignmentPlan`][converge_suggestors.AssignmentPlan]
    (`pairs`, `total_cost`, and the rows or columns left over) and whose evidence is the
    problem's `"key/id"`. A payload that is not a valid problem (a ragged matrix, say), a
    `costs_digest` naming no matrix added with `add_costs` (or one of another shape), or a
    problem with no complete assignment becomes a `DIAGNOSTIC` fact
    `"{name}:{fact id}:failed"` saying why. Each problem is solved once, judged from the
    context, in a worker thread: the event loop stays free while SciPy works.

    Raises:
        ImportError: SciPy is not installed (the `optimize` extra).
    """

    __slots__ = ("_input_key", "_matrices", "_name", "_solver")

    def __init__(self, input_key: KeyLike, *, name: str = "assignment") -> None:
        input_key = key_named(input_key)
        self._solver = load_solver("AssignmentSuggestor")
        self._matrices = CostMatrices("AssignmentSuggestor")
        if input_key in (ContextKey.STRATEGIES, ContextKey.DIAGNOSTIC):
            raise ValueError(f"AssignmentSuggestor {name!r}: input_key cannot be {input_key.value}")
        self._input_key = input_key
        self._name = name

    def __repr__(self) -> str:
        return f"AssignmentSuggestor({self._name!r}, input_key={self._input_key.value})"

    @property
    def name(self) -> str:
        """The name given (`"assignment"` by default)."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The input key."""
        return (self._input_key,)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """`STRATEGIES` and `DIAGNOSTIC` (failures)."""
        return (ContextKey.STRATEGIES, ContextKey.DIAGNOSTIC)

    def add_costs(self, costs: ArrayLike | Sequence[Sequence[float | None]], /) -> str:
        """Keep a cost matrix for problems to name by `costs_digest`; returns that digest.

        `costs` is anything numpy reads as a matrix of numbers (a 2-D array, a list of
        lists), one row per problem row; `nan` (or `None`) marks a pair that is not allowed.
        A read-only float64 copy is kept until `forget_costs`. The digest is `"sha256:"` and
        the hex SHA-256 of `b"float64 {rows}x{columns}\\n"` followed by the matrix as
        little-endian float64s in row order (`-0.0` written as `0.0`, every NaN as numpy's):
        the same numbers always give the same digest, which a fact can carry instead of them.

        Raises:
            ValueError: `costs` is not a non-empty matrix of numbers, or holds an infinity.
        """
        return self._matrices.add(costs)

    def forget_costs(self, digest: str, /) -> bool:
        """Drop the matrix of `digest`; whether there was one. Problems naming it then fail."""
        return self._matrices.forget(digest)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some input fact has neither a plan nor a failure."""
        return any(True for _ in self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Solve every pending problem, one after the other, in a worker thread."""
        return AgentEffect.with_proposals(
            [await anyio.to_thread.run_sync(self._handle, fact) for fact in self._pending(ctx)]
        )

    def _plan_id(self, fact: Fact) -> str:
        return f"{self._name}:{fact.id}"

    def _pending(self, ctx: Context) -> list[Fact]:
        return [
            fact
            for fact in ctx.get(self._input_key)
            if ctx.find(ContextKey.STRATEGIES, self._plan_id(fact)) is None
            and ctx.find(ContextKey.DIAGNOSTIC, f"{self._plan_id(fact)}:failed") is None
        ]

    def _handle(self, fact: Fact) -> ProposedFact:
        try:
            problem = fact.payload_as(AssignmentProblem)
        except ValidationError as error:
            return self._failure(
                fact, f"its payload is not a valid AssignmentProblem ({_validation_summary(error)})"
            )
        try:
            plan = solve_problem(problem, self._solver, self._matrices)
        except ValueError as error:
            return self._failure(fact, str(error))
        return ProposedFact(
            key=ContextKey.STRATEGIES,
            id=self._plan_id(fact),
            content=f"{_describe(plan)} for {fact.ref}",
            payload=plan.model_dump(mode="json"),  # no costs_digest key unless it has one
            provenance=self._name,
            evidence=(fact.ref,),
        )

    def _failure(self, fact: Fact, why: str) -> ProposedFact:
        return ProposedFact(
            key=ContextKey.DIAGNOSTIC,
            id=f"{self._plan_id(fact)}:failed",
            content=f"{self._name} could not solve {fact.ref}: {why}",
            provenance=self._name,
            evidence=(fact.ref,),
        )


@final
class AssignmentPack:
    """The assignment solver as a [`Pack`][converge.Pack], with a budget on the total cost.

    Its one invariant is "total cost within budget" (`total_cost <= budget`; always met
    without a budget). The gate promotes a plan that meets it; a plan over budget is
    escalated by default (staged under `PROPOSALS` for a validator or a human to decide,
    since spending more may still be the right call) or rejected with
    `over_budget="reject"`. Run it with
    [`PackSuggestor`][converge_suggestors.PackSuggestor]; a problem with no complete
    assignment makes `solve` raise `ValueError`, which `PackSuggestor` records as a
    `DIAGNOSTIC` fact. Like the suggestor, it takes large matrices by digest (`add_costs`).

    Raises:
        ImportError: SciPy is not installed (the `optimize` extra).
    """

    __slots__ = ("_budget", "_matrices", "_name", "_over_budget", "_solver")

    def __init__(
        self,
        budget: float | None = None,
        *,
        over_budget: Literal["escalate", "reject"] = "escalate",
        name: str = "assignment",
    ) -> None:
        self._solver = load_solver("AssignmentPack")
        self._matrices = CostMatrices("AssignmentPack")
        if budget is not None and not math.isfinite(budget):
            raise ValueError(f"AssignmentPack: budget must be finite, got {budget!r}")
        self._budget = budget
        self._over_budget: GateVerdict = over_budget
        self._name = name

    def __repr__(self) -> str:
        return (
            f"AssignmentPack(budget={self._budget!r}, over_budget={self._over_budget!r}, "
            f"name={self._name!r})"
        )

    @property
    def name(self) -> str:
        """The name given (`"assignment"` by default)."""
        return self._name

    @property
    def version(self) -> str:
        """`"1"`."""
        return "1"

    @property
    def input_model(self) -> type[AssignmentProblem]:
        """[`AssignmentProblem`][converge_suggestors.AssignmentProblem]."""
        return AssignmentProblem

    @property
    def budget(self) -> float | None:
        """The most the total cost may be, or `None` for no limit."""
        return self._budget

    def add_costs(self, costs: ArrayLike | Sequence[Sequence[float | None]], /) -> str:
        """Keep a cost matrix for problems to name by `costs_digest`; returns that digest.

        As [`AssignmentSuggestor.add_costs`][converge_suggestors.AssignmentSuggestor.add_costs].

        Raises:
            ValueError: `costs` is not a non-empty matrix of numbers, or holds an infinity.
        """
        return self._matrices.add(costs)

    def forget_costs(self, digest: str, /) -> bool:
        """Drop the matrix of `digest`; whether there was one."""
        return self._matrices.forget(digest)

    def solve(self, inputs: AssignmentProblem, /) -> AssignmentPlan:
        """The optimal assignment.

        Raises:
            ValueError: No complete assignment of the smaller side exists, or `costs_digest`
                names no matrix added with `add_costs` (or one of another shape).
        """
        return solve_problem(inputs, self._solver, self._matrices)

    def check_invariants(self, plan: AssignmentPlan, /) -> Sequence[InvariantResult]:
        """One result: whether the total cost is within the budget."""
        budget = self._budget
        if budget is None or plan.total_cost <= budget:
            return (InvariantResult.ok(),)
        return (
            InvariantResult.violated(
                f"total cost {plan.total_cost:g} exceeds the budget of {budget:g}"
            ),
        )

    def evaluate_gate(
        self, plan: AssignmentPlan, results: Sequence[InvariantResult], /
    ) -> GateVerdict:
        """`"promote"` when every invariant holds, else the `over_budget` verdict."""
        return "promote" if all(result.is_ok for result in results) else self._over_budget
