"""The assignment battery's models and solver: problems, plans, matrices kept by digest.

`AssignmentProblem`, `AssignmentPair` and `AssignmentPlan` are public (re-exported by
`converge_suggestors`); `CostMatrices` holds what `add_costs` adds, and `solve_problem` turns a
problem into a plan with `scipy.optimize.linear_sum_assignment`. numpy is imported only inside
functions: it comes with SciPy (the `optimize` extra), which a suggestor or pack checks for
when it is built.
"""

from __future__ import annotations

import hashlib
import importlib
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Final, Protocol, cast, final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["AssignmentPair", "AssignmentPlan", "AssignmentProblem"]

_DIGEST: Final = r"^sha256:[0-9a-f]{64}$"

_Cost = Annotated[float, Field(allow_inf_nan=False)]


class _Indices(Protocol):
    def tolist(self) -> list[int]: ...


class Solver(Protocol):
    def __call__(
        self, cost_matrix: NDArray[np.float64], maximize: bool = False
    ) -> tuple[_Indices, _Indices]: ...


def load_solver(owner: str) -> Solver:
    try:
        module = importlib.import_module("scipy.optimize")
    except ImportError:
        raise ImportError(
            f"{owner} needs SciPy: install the 'optimize' extra "
            '(pip install "converge-engine[optimize]")'
        ) from None
    return cast(Solver, module.linear_sum_assignment)


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

    A large matrix is better not written out: add it to the suggestor or pack
    (`add_costs`) and give the digest that returns as `costs_digest` instead of `costs`.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    rows: tuple[str, ...] = Field(min_length=1)
    """Row labels (workers, say), unique."""
    columns: tuple[str, ...] = Field(min_length=1)
    """Column labels (tasks, say), unique."""
    costs: tuple[tuple[_Cost | None, ...], ...] = ()
    """`costs[i][j]` is the cost of matching `rows[i]` with `columns[j]`, or `None` when that
    pair is not allowed; one inner sequence per row, one entry per column, finite numbers.
    Empty when `costs_digest` names the matrix."""
    costs_digest: str | None = Field(default=None, pattern=_DIGEST, exclude_if=lambda v: v is None)
    """The digest `add_costs` returned for the matrix (`"sha256:..."`), instead of `costs`."""
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
        if self.costs_digest is not None:
            if self.costs:
                raise ValueError("give costs or costs_digest, not both")
            return self
        if not self.costs:
            raise ValueError(
                "costs is missing: give costs (the matrix) or costs_digest (a matrix added "
                "with add_costs)"
            )
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
    costs_digest: str | None = None
    """The problem's `costs_digest`, when it named its matrix that way (left out of the JSON
    otherwise)."""

    @model_serializer(mode="wrap")
    def _without_absent_digest(self, handler: SerializerFunctionWrapHandler) -> object:
        data: object = handler(self)
        if self.costs_digest is None and isinstance(data, dict):
            kept = cast("dict[str, object]", data)
            kept.pop("costs_digest", None)
            return kept
        return data


class CostMatrices:
    """Matrices added with `add_costs`, read-only float64 arrays by their content digest."""

    __slots__ = ("_matrices", "_owner")

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._matrices: dict[str, NDArray[np.float64]] = {}

    def add(self, costs: ArrayLike | Sequence[Sequence[float | None]]) -> str:
        import numpy as np  # the optimize extra: SciPy is installed, so numpy is

        try:
            matrix = np.array(costs, dtype="<f8", order="C")
        except (TypeError, ValueError) as error:
            raise ValueError(f"{self._owner}: costs is not a matrix of numbers ({error})") from None
        if matrix.ndim != 2 or 0 in matrix.shape:
            raise ValueError(
                f"{self._owner}: costs must be a matrix with at least one row and one column, "
                f"got shape {matrix.shape}"
            )
        if np.isinf(matrix).any():
            raise ValueError(
                f"{self._owner}: costs holds an infinity; use nan (or None) for a pair that "
                "is not allowed"
            )
        matrix += 0.0  # -0.0 becomes 0.0, and below every NaN gets one bit pattern
        matrix[np.isnan(matrix)] = np.nan
        matrix.flags.writeable = False
        rows, columns = matrix.shape
        hasher = hashlib.sha256(f"float64 {rows}x{columns}\n".encode("ascii"))
        hasher.update(matrix.data)
        digest = f"sha256:{hasher.hexdigest()}"
        self._matrices.setdefault(digest, matrix)
        return digest

    def forget(self, digest: str) -> bool:
        return self._matrices.pop(digest, None) is not None

    def matrix(self, problem: AssignmentProblem) -> NDArray[np.float64]:
        """The problem's matrix, NaN for a pair not allowed; `ValueError` if it has none."""
        import numpy as np

        digest = problem.costs_digest
        if digest is None:
            return np.array(problem.costs, dtype=np.float64)
        matrix = self._matrices.get(digest)
        if matrix is None:
            raise ValueError(
                f"costs_digest {digest} names no matrix added to this {self._owner} (add_costs)"
            )
        expected = (len(problem.rows), len(problem.columns))
        if matrix.shape != expected:
            raise ValueError(
                f"the matrix of costs_digest {digest} is {matrix.shape[0]}x{matrix.shape[1]}, "
                f"expected {expected[0]}x{expected[1]} (rows x columns)"
            )
        return matrix


def _check_feasible(
    rows: Sequence[str], columns: Sequence[str], allowed: NDArray[np.bool_]
) -> None:
    """`ValueError` naming a line of the smaller side with no allowed pair, if any."""
    import numpy as np

    if len(rows) <= len(columns):
        blocked = np.flatnonzero(~allowed.any(axis=1))
        if blocked.size:
            raise ValueError(
                f"no complete assignment exists: row {rows[int(blocked[0])]!r} has no "
                "allowed column"
            )
    if len(columns) <= len(rows):
        blocked = np.flatnonzero(~allowed.any(axis=0))
        if blocked.size:
            raise ValueError(
                f"no complete assignment exists: column {columns[int(blocked[0])]!r} has no "
                "allowed row"
            )


def solve_problem(
    problem: AssignmentProblem, solver: Solver, matrices: CostMatrices
) -> AssignmentPlan:
    """The optimal plan; `ValueError` naming why when no complete assignment exists."""
    import numpy as np

    rows, columns = problem.rows, problem.columns
    matrix = matrices.matrix(problem)
    allowed = ~np.isnan(matrix)
    _check_feasible(rows, columns, allowed)
    work = np.where(allowed, -matrix if problem.maximize else matrix, np.inf)
    try:
        chosen_rows, chosen_columns = solver(work)
    except ValueError as error:
        if "infeasible" not in str(error):
            raise
        smaller = "row" if len(rows) <= len(columns) else "column"
        raise ValueError(
            f"no complete assignment exists: the allowed (non-null) pairs cannot match every "
            f"{smaller} to a different {'column' if smaller == 'row' else 'row'}"
        ) from None
    row_indices, column_indices = chosen_rows.tolist(), chosen_columns.tolist()
    costs: list[float] = matrix[row_indices, column_indices].tolist()
    pairs = tuple(
        AssignmentPair(row=rows[i], column=columns[j], cost=cost)
        for i, j, cost in zip(row_indices, column_indices, costs, strict=True)
    )
    matched_rows, matched_columns = set(row_indices), set(column_indices)
    return AssignmentPlan(
        pairs=pairs,
        total_cost=math.fsum(costs),
        unassigned_rows=tuple(label for i, label in enumerate(rows) if i not in matched_rows),
        unassigned_columns=tuple(
            label for j, label in enumerate(columns) if j not in matched_columns
        ),
        costs_digest=problem.costs_digest,
    )
