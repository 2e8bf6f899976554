"""`AssignmentSuggestor` and `AssignmentPack`: optimal assignment with SciPy (extra `optimize`).

The solver is `scipy.optimize.linear_sum_assignment`, installed with the `optimize` extra
(`pip install "converge[optimize]"`) and imported when a suggestor or pack is built.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Annotated, ClassVar, Final, Literal, Protocol, cast, final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    Fact,
    GateVerdict,
    InvariantResult,
    ProposedFact,
)

__all__ = [
    "AssignmentPack",
    "AssignmentPair",
    "AssignmentPlan",
    "AssignmentProblem",
    "AssignmentSuggestor",
]

_SHOWN_PAIRS: Final = 10

_Cost = Annotated[float, Field(allow_inf_nan=False)]


class _Indices(Protocol):
    def tolist(self) -> list[int]: ...


class _LinearSumAssignment(Protocol):
    def __call__(
        self, cost_matrix: list[list[float]], maximize: bool = False
    ) -> tuple[_Indices, _Indices]: ...


def _linear_sum_assignment(owner: str) -> _LinearSumAssignment:
    try:
        module = importlib.import_module("scipy.optimize")
    except ImportError:
        raise ImportError(
            f"{owner} needs SciPy: install the 'optimize' extra "
            '(pip install "converge[optimize]")'
        ) from None
    return cast(_LinearSumAssignment, module.linear_sum_assignment)


@final
class AssignmentProblem(BaseModel, frozen=True):
    """A cost matrix: what assigning each row to each column costs.

    Every row is matched to at most one column and every column to at most one row, and all
    of the smaller side is matched, at the least total cost. Rows and columns may differ in
    number. A `null` cost (`None`) marks a pair that may not be matched; JSON has no
    infinity, so infeasible is always `null`.

    ```python
    AssignmentProblem(
        rows=("ada", "ben"),
        columns=("backend", "frontend"),
        costs=((3, 5), (None, 4)),  # ben cannot take backend
    )
    ```
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[str, ...] = Field(min_length=1)
    """Row labels (workers, say), unique."""
    columns: tuple[str, ...] = Field(min_length=1)
    """Column labels (tasks, say), unique."""
    costs: tuple[tuple[_Cost | None, ...], ...]
    """`costs[i][j]` is the cost of matching `rows[i]` with `columns[j]`, or `None` when that
    pair is not allowed; one inner sequence per row, one entry per column, finite numbers."""
    maximize: bool = False
    """Look for the largest total instead of the smallest."""

    @model_validator(mode="after")
    def _matrix_is_rectangular(self) -> AssignmentProblem:
        for side, labels in (("rows", self.rows), ("columns", self.columns)):
            seen: set[str] = set()
            for label in labels:
                if label in seen:
                    raise ValueError(f"{side} must be unique; {label!r} appears twice")
                seen.add(label)
        if len(self.costs) != len(self.rows):
            raise ValueError(
                f"costs has {len(self.costs)} rows, expected {len(self.rows)} (one per row)"
            )
        width = len(self.columns)
        for index, line in enumerate(self.costs):
            if len(line) != width:
                raise ValueError(
                    f"costs row {index} ({self.rows[index]!r}) has {len(line)} entries, "
                    f"expected {width} (one per column); the matrix is ragged"
                )
        return self


@final
class AssignmentPair(BaseModel, frozen=True):
    """One matched row and column."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    row: str
    """The row label."""
    column: str
    """The column label."""
    cost: float
    """What this pair costs."""


@final
class AssignmentPlan(BaseModel, frozen=True):
    """An optimal assignment: the pairs in row order, and what they cost together."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    pairs: tuple[AssignmentPair, ...]
    """The matched pairs, in the order of the problem's rows."""
    total_cost: float
    """The sum of the pairs' costs."""
    unassigned_rows: tuple[str, ...] = ()
    """Rows left without a column (when there are more rows than columns)."""
    unassigned_columns: tuple[str, ...] = ()
    """Columns left without a row (when there are more columns than rows)."""


def _solve(problem: AssignmentProblem, solver: _LinearSumAssignment) -> AssignmentPlan:
    """The optimal plan; `ValueError` naming why when no complete assignment exists."""
    rows, columns = problem.rows, problem.columns
    if len(rows) <= len(columns):
        for label, line in zip(rows, problem.costs, strict=True):
            if all(cost is None for cost in line):
                raise ValueError(
                    f"no complete assignment exists: row {label!r} has no allowed column"
                )
    if len(columns) <= len(rows):
        for index, label in enumerate(columns):
            if all(line[index] is None for line in problem.costs):
                raise ValueError(
                    f"no complete assignment exists: column {label!r} has no allowed row"
                )
    sign = -1.0 if problem.maximize else 1.0
    matrix = [
        [math.inf if cost is None else sign * cost for cost in line] for line in problem.costs
    ]
    try:
        chosen_rows, chosen_columns = solver(matrix)
    except ValueError as error:
        if "infeasible" not in str(error):
            raise
        smaller = "row" if len(rows) <= len(columns) else "column"
        raise ValueError(
            f"no complete assignment exists: the allowed (non-null) pairs cannot match every "
            f"{smaller} to a different {'column' if smaller == 'row' else 'row'}"
        ) from None
    pairs: list[AssignmentPair] = []
    for i, j in zip(chosen_rows.tolist(), chosen_columns.tolist(), strict=True):
        cost = problem.costs[i][j]
        assert cost is not None  # the solver never picks an infinite cost
        pairs.append(AssignmentPair(row=rows[i], column=columns[j], cost=cost))
    matched_rows = {pair.row for pair in pairs}
    matched_columns = {pair.column for pair in pairs}
    return AssignmentPlan(
        pairs=tuple(pairs),
        total_cost=math.fsum(pair.cost for pair in pairs),
        unassigned_rows=tuple(label for label in rows if label not in matched_rows),
        unassigned_columns=tuple(label for label in columns if label not in matched_columns),
    )


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
    problem's `"key/id"`. A payload that is not a valid problem (a ragged matrix, say) or a
    problem with no complete assignment becomes a `DIAGNOSTIC` fact
    `"{name}:{fact id}:failed"` saying why. Each problem is solved once, judged from the
    context.

    Raises:
        ImportError: SciPy is not installed (the `optimize` extra).
    """

    __slots__ = ("_input_key", "_name", "_solver")

    def __init__(self, input_key: ContextKey, *, name: str = "assignment") -> None:
        self._solver = _linear_sum_assignment("AssignmentSuggestor")
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
    def dependencies(self) -> Sequence[ContextKey]:
        """The input key."""
        return (self._input_key,)

    @property
    def writes(self) -> Sequence[ContextKey]:
        """`STRATEGIES` and `DIAGNOSTIC` (failures)."""
        return (ContextKey.STRATEGIES, ContextKey.DIAGNOSTIC)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some input fact has neither a plan nor a failure."""
        return any(True for _ in self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Solve every pending problem."""
        return AgentEffect.with_proposals(self._handle(fact) for fact in self._pending(ctx))

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
            plan = _solve(problem, self._solver)
        except ValueError as error:
            return self._failure(fact, str(error))
        return ProposedFact(
            key=ContextKey.STRATEGIES,
            id=self._plan_id(fact),
            content=f"{_describe(plan)} for {fact.ref}",
            payload=plan.model_dump(mode="json"),
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
    `DIAGNOSTIC` fact.

    Raises:
        ImportError: SciPy is not installed (the `optimize` extra).
    """

    __slots__ = ("_budget", "_name", "_over_budget", "_solver")

    def __init__(
        self,
        budget: float | None = None,
        *,
        over_budget: Literal["escalate", "reject"] = "escalate",
        name: str = "assignment",
    ) -> None:
        self._solver = _linear_sum_assignment("AssignmentPack")
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

    def solve(self, inputs: AssignmentProblem, /) -> AssignmentPlan:
        """The optimal assignment.

        Raises:
            ValueError: No complete assignment of the smaller side exists.
        """
        return _solve(inputs, self._solver)

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
