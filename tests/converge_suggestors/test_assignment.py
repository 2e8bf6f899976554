"""AssignmentSuggestor and AssignmentPack: optimal plans checked by brute force and by SciPy."""

import gc
import hashlib
import importlib
import itertools
import math
import random
import sys
import threading
import time
from typing import cast

import anyio
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from converge import (
    ContextKey,
    ConvergeResult,
    Engine,
    Pack,
    ProposedFact,
    Suggestor,
)
from converge_suggestors import (
    AssignmentPack,
    AssignmentPair,
    AssignmentPlan,
    AssignmentProblem,
    AssignmentSuggestor,
    PackSuggestor,
    ValidationAgent,
)
from tests.doubles import seed

SEEDS = ContextKey.SEEDS
STRATEGIES = ContextKey.STRATEGIES
PROPOSALS = ContextKey.PROPOSALS
DIAGNOSTIC = ContextKey.DIAGNOSTIC

Matrix = list[list[float | None]]


def problem(costs: Matrix, *, maximize: bool = False) -> AssignmentProblem:
    return AssignmentProblem(
        rows=tuple(f"r{i}" for i in range(len(costs))),
        columns=tuple(f"c{j}" for j in range(len(costs[0]))),
        costs=tuple(tuple(line) for line in costs),
        maximize=maximize,
    )


def brute_force(costs: Matrix, *, maximize: bool = False) -> float | None:
    """The best total over every complete assignment of the smaller side, or None."""
    n_rows, n_columns = len(costs), len(costs[0])
    best: float | None = None
    if n_rows <= n_columns:
        choices = (
            list(zip(range(n_rows), columns, strict=True))
            for columns in itertools.permutations(range(n_columns), n_rows)
        )
    else:
        choices = (
            list(zip(rows, range(n_columns), strict=True))
            for rows in itertools.permutations(range(n_rows), n_columns)
        )
    for pairs in choices:
        picked = [costs[i][j] for i, j in pairs]
        if any(cost is None for cost in picked):
            continue
        total = math.fsum(cost for cost in picked if cost is not None)
        if best is None or (total > best if maximize else total < best):
            best = total
    return best


def check_plan(costs: Matrix, plan: AssignmentPlan) -> None:
    """The plan is a matching of the smaller side, with the costs of the matrix."""
    rows = [pair.row for pair in plan.pairs]
    columns = [pair.column for pair in plan.pairs]
    assert len(set(rows)) == len(rows) == min(len(costs), len(costs[0]))
    assert len(set(columns)) == len(columns)
    assert rows == sorted(rows, key=lambda label: int(label[1:]))
    for pair in plan.pairs:
        assert pair.cost == costs[int(pair.row[1:])][int(pair.column[1:])]
    assert plan.total_cost == math.fsum(pair.cost for pair in plan.pairs)
    assert set(plan.unassigned_rows) == {f"r{i}" for i in range(len(costs))} - set(rows)
    assert set(plan.unassigned_columns) == {f"c{j}" for j in range(len(costs[0]))} - set(columns)


@st.composite
def matrices(draw: st.DrawFn) -> Matrix:
    n_rows = draw(st.integers(1, 7))
    n_columns = draw(st.integers(1, 7))
    cost = st.one_of(st.none(), st.integers(-20, 50).map(float), st.floats(0, 100, allow_nan=False))
    entries = st.lists(cost, min_size=n_columns, max_size=n_columns)
    return draw(st.lists(entries, min_size=n_rows, max_size=n_rows))


@given(matrices(), st.booleans())
def test_pack_solve_matches_brute_force_on_small_matrices(costs: Matrix, maximize: bool) -> None:
    expected = brute_force(costs, maximize=maximize)
    pack = AssignmentPack()
    if expected is None:
        with pytest.raises(ValueError, match="no complete assignment exists"):
            pack.solve(problem(costs, maximize=maximize))
        return
    plan = pack.solve(problem(costs, maximize=maximize))
    check_plan(costs, plan)
    assert math.isclose(plan.total_cost, expected, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("maximize", [False, True])
def test_pack_solve_matches_scipy_on_a_50_by_50_matrix(maximize: bool) -> None:
    generator = random.Random(50)
    costs: Matrix = [[float(generator.randint(1, 1000)) for _ in range(50)] for _ in range(50)]
    plan = AssignmentPack().solve(problem(costs, maximize=maximize))
    optimize = importlib.import_module("scipy.optimize")  # untyped: SciPy ships no stubs
    rows, columns = optimize.linear_sum_assignment(np.array(costs), maximize=maximize)
    expected: list[tuple[int, int]] = list(zip(rows.tolist(), columns.tolist(), strict=True))
    check_plan(costs, plan)
    assert [(p.row, p.column) for p in plan.pairs] == [(f"r{i}", f"c{j}") for i, j in expected]
    assert plan.total_cost == math.fsum(float(costs[i][j] or 0) for i, j in expected)


def test_pack_solve_assigns_every_row_of_a_wide_matrix() -> None:
    plan = AssignmentPack().solve(problem([[4, 1, 3], [2, 0, 5]]))
    assert plan == AssignmentPlan(
        pairs=(
            AssignmentPair(row="r0", column="c1", cost=1),
            AssignmentPair(row="r1", column="c0", cost=2),
        ),
        total_cost=3,
        unassigned_columns=("c2",),
    )


def test_pack_solve_assigns_every_column_of_a_tall_matrix() -> None:
    plan = AssignmentPack().solve(problem([[4, 1], [2, 0], [3, None]]))
    assert [(p.row, p.column) for p in plan.pairs] == [("r0", "c1"), ("r1", "c0")]
    assert plan.total_cost == 3
    assert plan.unassigned_rows == ("r2",)


@pytest.mark.parametrize(
    ("costs", "message"),
    [
        (
            [[1, None], [None, None]],
            "no complete assignment exists: row 'r1' has no allowed column",
        ),
        ([[None, 1, 2], [None, 3, 4]], None),
        ([[1, 2], [None, None], [3, 4]], None),
        ([[None, 1], [None, 2], [None, 3]], "column 'c0' has no allowed row"),
        (
            [[1, None, None], [2, None, None], [None, 1, 1]],
            "no complete assignment exists: the allowed (non-null) pairs cannot match every row "
            "to a different column",
        ),
    ],
)
def test_pack_solve_explains_infeasible_problems(costs: Matrix, message: str | None) -> None:
    if message is None:  # feasible: an all-null line on the larger side is simply left out
        AssignmentPack().solve(problem(costs))
        return
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AssignmentPack().solve(problem(costs))


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"rows": ["a", "b"], "columns": ["x", "y"], "costs": [[1, 2], [3]]},
            "costs row 1 ('b') has 1 entries, expected 2 (one per column); the matrix is ragged",
        ),
        (
            {"rows": ["a", "b"], "columns": ["x"], "costs": [[1]]},
            "costs has 1 rows, expected 2 (one per row)",
        ),
        (
            {"rows": ["a", "a"], "columns": ["x"], "costs": [[1], [2]]},
            "rows must be unique; 'a' appears twice",
        ),
        ({"rows": [], "columns": ["x"], "costs": []}, "rows: Tuple should have at least 1 item"),
        (
            {"rows": ["a"], "columns": ["x"], "costs": [["inf"]]},
            "costs.0.0: Input should be a finite number",
        ),
        ({"rows": ["a"], "columns": ["x"], "costs": [[1]], "budget": 3}, "budget: Extra inputs"),
    ],
)
def test_assignment_problem_refuses_bad_matrices(payload: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        AssignmentProblem.model_validate(payload)
    text = "; ".join(
        f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in caught.value.errors()
    )
    assert message in text


STAFFING = {
    "rows": ["ada", "ben", "cy"],
    "columns": ["backend", "frontend", "ops"],
    "costs": [[3, 5, 9], [None, 4, 2], [2, 8, None]],
}

STAFFING_SEED = seed("staffing", "who does what", provenance="input", payload=STAFFING)


async def run_with(suggestor: Suggestor, *inputs: ProposedFact) -> ConvergeResult:
    engine = Engine()
    engine.register_suggestor(suggestor)
    if not isinstance(suggestor, AssignmentSuggestor):
        engine.register_suggestor(ValidationAgent())
    result = await engine.run(inputs=list(inputs))
    assert result.converged, result.detail
    return result


def test_assignment_suggestor_shape() -> None:
    suggestor = AssignmentSuggestor(SEEDS)
    assert isinstance(suggestor, Suggestor)
    assert suggestor.name == "assignment"
    assert tuple(suggestor.dependencies) == (SEEDS,)
    assert tuple(suggestor.writes) == (STRATEGIES, DIAGNOSTIC)


async def test_assignment_suggestor_proposes_the_optimal_plan_to_strategies() -> None:
    result = await run_with(AssignmentSuggestor(SEEDS), STAFFING_SEED)
    fact = result.context.find(STRATEGIES, "assignment:staffing")
    assert fact is not None
    assert fact.payload == {
        "pairs": [
            {"row": "ada", "column": "frontend", "cost": 5.0},
            {"row": "ben", "column": "ops", "cost": 2.0},
            {"row": "cy", "column": "backend", "cost": 2.0},
        ],
        "total_cost": 9.0,
        "unassigned_rows": [],
        "unassigned_columns": [],
    }
    assert fact.content == (
        "assign ada->frontend, ben->ops, cy->backend (total cost 9) for seeds/staffing"
    )
    assert fact.evidence == ("seeds/staffing",)
    assert fact.provenance == "assignment"
    assert fact.payload_as(AssignmentPlan).total_cost == 9


async def test_assignment_suggestor_shortens_the_content_of_large_plans() -> None:
    size = 12
    payload = {
        "rows": [f"w{i}" for i in range(size)],
        "columns": [f"t{i}" for i in range(size)],
        "costs": [[0 if i == j else 1 for j in range(size)] for i in range(size)],
    }
    result = await run_with(
        AssignmentSuggestor(SEEDS, name="solver"),
        seed("big", "who does what", provenance="input", payload=payload),
    )
    fact = result.context.find(STRATEGIES, "solver:big")
    assert fact is not None
    assert fact.content.startswith("assign w0->t0, w1->t1, ")
    assert fact.content.endswith("w9->t9 and 2 more (total cost 0) for seeds/big")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (
            "three people, three jobs",
            "its payload is not a valid AssignmentProblem (payload: Input should be a valid "
            "dictionary or instance of AssignmentProblem)",
        ),
        (
            {"rows": ["a", "b"], "columns": ["x", "y"], "costs": [[1, 2], [3]]},
            "its payload is not a valid AssignmentProblem (payload: Value error, costs row 1 "
            "('b') has 1 entries, expected 2 (one per column); the matrix is ragged)",
        ),
        (
            {"rows": ["a", "b"], "columns": ["x", "y"], "costs": [[1, None], [2, None]]},
            "no complete assignment exists: column 'y' has no allowed row",
        ),
    ],
)
async def test_assignment_suggestor_explains_what_it_cannot_solve(
    payload: object, why: str
) -> None:
    result = await run_with(
        AssignmentSuggestor(SEEDS),
        seed("bad", "who does what", provenance="input", payload=payload),
    )
    failure = result.context.find(DIAGNOSTIC, "assignment:bad:failed")
    assert failure is not None
    assert failure.content == f"assignment could not solve seeds/bad: {why}"
    assert failure.evidence == ("seeds/bad",)
    assert not result.context.has(STRATEGIES)


async def test_assignment_suggestor_solves_each_problem_once() -> None:
    first = await run_with(AssignmentSuggestor(SEEDS), STAFFING_SEED)
    suggestor = AssignmentSuggestor(SEEDS)
    assert not suggestor.accepts(first.context)
    engine = Engine()
    engine.register_suggestor(suggestor)
    again = await engine.run(
        context=first.context,
        inputs=[seed("other", "who does what", provenance="input", payload=STAFFING)],
    )
    assert [fact.id for fact in again.context.get(STRATEGIES)] == [
        "assignment:staffing",
        "assignment:other",
    ]
    assert [e.proposals for cycle in again.trace.cycles for e in cycle.executions] == [1]


def test_assignment_pack_is_a_pack() -> None:
    pack: Pack[AssignmentProblem, AssignmentPlan] = AssignmentPack(budget=10)
    assert (pack.name, pack.version, pack.input_model) == ("assignment", "1", AssignmentProblem)


def test_assignment_pack_gate_promotes_within_budget_and_escalates_or_rejects_over() -> None:
    plan = AssignmentPack().solve(AssignmentProblem.model_validate(STAFFING))
    within, exact, over = AssignmentPack(budget=10), AssignmentPack(budget=9), AssignmentPack(8.5)
    assert within.evaluate_gate(plan, within.check_invariants(plan)) == "promote"
    assert exact.evaluate_gate(plan, exact.check_invariants(plan)) == "promote"
    [result] = over.check_invariants(plan)
    assert result.reason == "total cost 9 exceeds the budget of 8.5"
    assert over.evaluate_gate(plan, (result,)) == "escalate"
    strict = AssignmentPack(8.5, over_budget="reject")
    assert strict.evaluate_gate(plan, strict.check_invariants(plan)) == "reject"
    assert AssignmentPack().check_invariants(plan)[0].is_ok


async def test_assignment_pack_promotes_a_plan_within_budget_end_to_end() -> None:
    suggestor = PackSuggestor(AssignmentPack(budget=10), SEEDS, STRATEGIES)
    result = await run_with(suggestor, STAFFING_SEED)
    fact = result.context.find(STRATEGIES, "assignment:staffing")
    assert fact is not None
    assert fact.promotion.suggestor == "pack:assignment:seeds->strategies"
    assert fact.provenance == "assignment@1"
    assert fact.evidence == ("seeds/staffing",)
    assert fact.payload_as(AssignmentPlan).total_cost == 9
    assert not result.context.has(PROPOSALS)


async def test_assignment_pack_escalates_a_plan_over_budget_for_validation() -> None:
    suggestor = PackSuggestor(AssignmentPack(budget=8), SEEDS, STRATEGIES)
    result = await run_with(suggestor, STAFFING_SEED)
    staged = result.context.find(PROPOSALS, "assignment:staffing")
    assert staged is not None
    assert staged.target is STRATEGIES
    assert staged.content == (
        "assignment 1 plan for seeds/staffing (escalated: total cost 9 exceeds the budget of 8)"
    )
    promoted = result.context.find(STRATEGIES, "assignment:staffing")
    assert promoted is not None
    assert promoted.promotion.suggestor == "ValidationAgent"
    assert promoted.evidence == ("seeds/staffing", "proposals/assignment:staffing")


async def test_assignment_pack_rejects_a_plan_over_budget_when_asked() -> None:
    pack = AssignmentPack(budget=8, over_budget="reject")
    result = await run_with(PackSuggestor(pack, SEEDS, STRATEGIES), STAFFING_SEED)
    failure = result.context.find(DIAGNOSTIC, "assignment:staffing:failed")
    assert failure is not None
    assert failure.content == (
        "pack assignment failed on input seeds/staffing: the pack's gate rejected the plan "
        "(total cost 9 exceeds the budget of 8)"
    )
    assert not result.context.has(STRATEGIES)


async def test_assignment_pack_records_an_infeasible_problem() -> None:
    payload = {"rows": ["a", "b"], "columns": ["x", "y"], "costs": [[1, None], [2, None]]}
    result = await run_with(
        PackSuggestor(AssignmentPack(), SEEDS, STRATEGIES),
        seed("p", "who does what", provenance="input", payload=payload),
    )
    failure = result.context.find(DIAGNOSTIC, "assignment:p:failed")
    assert failure is not None
    assert failure.content == (
        "pack assignment failed on input seeds/p: the pack raised ValueError: no complete "
        "assignment exists: column 'y' has no allowed row"
    )


def test_assignment_pack_refuses_a_budget_that_is_not_finite() -> None:
    with pytest.raises(ValueError, match="budget must be finite"):
        AssignmentPack(budget=math.inf)


def test_assignment_suggestor_refuses_its_own_output_keys_as_input() -> None:
    with pytest.raises(ValueError, match="input_key cannot be strategies"):
        AssignmentSuggestor(STRATEGIES)


@pytest.mark.parametrize("build", [lambda: AssignmentSuggestor(SEEDS), lambda: AssignmentPack()])
def test_assignment_names_the_extra_when_scipy_is_missing(
    monkeypatch: pytest.MonkeyPatch, build: object
) -> None:
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    assert callable(build)
    with pytest.raises(
        ImportError,
        match=r"install the 'optimize' extra \(pip install \"converge-engine\[optimize\]\"\)",
    ):
        build()


# Large matrices by digest, and the solver off the event loop.


def digest_of(matrix: np.ndarray[tuple[int, int], np.dtype[np.float64]]) -> str:
    rows, columns = matrix.shape
    header = f"float64 {rows}x{columns}\n".encode("ascii")
    return "sha256:" + hashlib.sha256(header + matrix.astype("<f8").tobytes()).hexdigest()


def test_add_costs_returns_the_sha256_of_the_float64_matrix() -> None:
    suggestor = AssignmentSuggestor(SEEDS)
    costs = [[3, 5, 9], [None, 4, 2]]
    digest = suggestor.add_costs(costs)
    assert digest == digest_of(np.array([[3, 5, 9], [np.nan, 4, 2]], dtype=np.float64))
    assert suggestor.add_costs(np.array(costs, dtype=np.float64)) == digest
    assert suggestor.add_costs([[3, 5, 9], [-np.nan, 4, 2]]) == digest  # one NaN pattern
    assert AssignmentPack().add_costs([[0.0, -0.0]]) == AssignmentPack().add_costs([[0, 0]])
    assert suggestor.add_costs([[3, 5, 9], [None, 4, 2.5]]) != digest


@pytest.mark.parametrize(
    ("costs", "message"),
    [
        ([1, 2, 3], r"costs must be a matrix with at least one row and one column, got shape"),
        ([list[float]()], r"costs must be a matrix .*, got shape \(1, 0\)"),
        ([[1, 2], [3]], "costs is not a matrix of numbers"),
        ([["a", "b"]], "costs is not a matrix of numbers"),
        ([[1, math.inf]], "costs holds an infinity; use nan"),
    ],
)
def test_add_costs_refuses_what_is_not_a_matrix_of_finite_numbers(
    costs: object, message: str
) -> None:
    with pytest.raises(ValueError, match=f"AssignmentSuggestor: {message}"):
        AssignmentSuggestor(SEEDS).add_costs(cast("list[list[float]]", costs))


@given(matrices(), st.booleans())
def test_a_matrix_named_by_digest_gives_the_plan_of_the_same_matrix_inline(
    costs: Matrix, maximize: bool
) -> None:
    pack = AssignmentPack()
    digest = pack.add_costs(costs)
    inline = problem(costs, maximize=maximize)
    named = inline.model_copy(update={"costs": (), "costs_digest": digest})
    try:
        expected = pack.solve(inline)
    except ValueError as error:
        with pytest.raises(ValueError, match=str(error).replace("(", r"\(").replace(")", r"\)")):
            pack.solve(named)
        return
    assert pack.solve(named) == expected.model_copy(update={"costs_digest": digest})


async def test_assignment_suggestor_solves_a_matrix_named_by_digest() -> None:
    suggestor = AssignmentSuggestor(SEEDS)
    costs = np.array(STAFFING["costs"], dtype=np.float64)
    digest = suggestor.add_costs(costs)
    costs[0, 0] = 100.0  # the suggestor keeps its own copy
    payload = {"rows": STAFFING["rows"], "columns": STAFFING["columns"], "costs_digest": digest}
    result = await run_with(suggestor, seed("staffing", "who", provenance="input", payload=payload))
    fact = result.context.find(STRATEGIES, "assignment:staffing")
    assert fact is not None
    assert fact.payload == {
        "pairs": [
            {"row": "ada", "column": "frontend", "cost": 5.0},
            {"row": "ben", "column": "ops", "cost": 2.0},
            {"row": "cy", "column": "backend", "cost": 2.0},
        ],
        "total_cost": 9.0,
        "unassigned_rows": [],
        "unassigned_columns": [],
        "costs_digest": digest,
    }
    assert fact.payload_as(AssignmentPlan).costs_digest == digest


async def test_assignment_suggestor_explains_a_missing_or_misshapen_matrix() -> None:
    suggestor = AssignmentSuggestor(SEEDS)
    square, forgotten = suggestor.add_costs([[1, 2], [3, 4]]), suggestor.add_costs([[5]])
    assert suggestor.forget_costs(forgotten)
    assert not suggestor.forget_costs(forgotten)
    inputs = [
        seed(ident, "who", provenance="input", payload={**labels, "costs_digest": digest})
        for ident, labels, digest in (
            ("wide", {"rows": ["a", "b"], "columns": ["x", "y", "z"]}, square),
            ("gone", {"rows": ["a"], "columns": ["x"]}, forgotten),
        )
    ]
    result = await run_with(suggestor, *inputs)
    assert [fact.content for fact in result.context.get(DIAGNOSTIC)] == [
        f"assignment could not solve seeds/wide: the matrix of costs_digest {square} is 2x2, "
        "expected 2x3 (rows x columns)",
        f"assignment could not solve seeds/gone: costs_digest {forgotten} names no matrix "
        "added to this AssignmentSuggestor (add_costs)",
    ]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"rows": ["a"], "columns": ["x"], "costs": [[1]], "costs_digest": "sha256:" + "0" * 64},
            "give costs or costs_digest, not both",
        ),
        ({"rows": ["a"], "columns": ["x"]}, "costs is missing: give costs (the matrix) or"),
        (
            {"rows": ["a"], "columns": ["x"], "costs_digest": "md5:00"},
            "costs_digest\n  String should match pattern",
        ),
    ],
)
def test_assignment_problem_takes_costs_or_costs_digest(
    payload: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AssignmentProblem.model_validate(payload)


async def test_assignment_pack_solves_a_matrix_named_by_digest() -> None:
    pack = AssignmentPack(budget=10)
    digest = pack.add_costs(STAFFING["costs"])
    payload = {"rows": STAFFING["rows"], "columns": STAFFING["columns"], "costs_digest": digest}
    result = await run_with(
        PackSuggestor(pack, SEEDS, STRATEGIES),
        seed("q3", "who", provenance="input", payload=payload),
    )
    fact = result.context.find(STRATEGIES, "assignment:q3")
    assert fact is not None
    assert fact.payload_as(AssignmentPlan).total_cost == 9
    assert fact.payload_as(AssignmentPlan).costs_digest == digest


async def test_assignment_suggestor_calls_the_solver_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    optimize = importlib.import_module("scipy.optimize")
    solve = optimize.linear_sum_assignment
    threads: list[int] = []

    def recording(*args: object, **kwargs: object) -> object:
        threads.append(threading.get_ident())
        return solve(*args, **kwargs)

    monkeypatch.setattr(optimize, "linear_sum_assignment", recording)
    await run_with(AssignmentSuggestor(SEEDS), STAFFING_SEED)
    assert threads
    assert threading.get_ident() not in threads


async def test_assignment_suggestor_leaves_the_event_loop_free_while_it_solves() -> None:
    """Three 1000 x 1000 problems (a few hundred ms of SciPy) beside a task ticking every 5 ms.

    Solved on the event loop, the longest gap between ticks would be the whole run; in a worker
    thread it stays near the tick (the bound, a quarter of the run, leaves room for a noisy
    machine). The garbage collector is off meanwhile: its pauses are the process's, not the
    suggestor's.
    """
    size = 1000
    suggestor = AssignmentSuggestor(SEEDS)
    generator = np.random.default_rng(13)
    labels = {"rows": [f"w{i}" for i in range(size)], "columns": [f"t{j}" for j in range(size)]}
    inputs = [
        seed(f"p{n}", "who", provenance="input", payload={**labels, "costs_digest": digest})
        for n in range(3)
        if (digest := suggestor.add_costs(generator.random((size, size))))
    ]
    engine = Engine()
    engine.register_suggestor(suggestor)
    ticks: list[float] = []
    result, elapsed = None, 0.0

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await anyio.sleep(0.005)

    gc.collect()
    gc.disable()  # a full collection of the test process's heap can pause the loop 50-100 ms
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            await anyio.sleep(0.005)
            started = time.perf_counter()
            result = await engine.run(inputs=inputs)
            elapsed = time.perf_counter() - started
            ticks.append(time.perf_counter())
            group.cancel_scope.cancel()
    finally:
        gc.enable()
    assert result is not None
    assert len(result.context.get(STRATEGIES)) == 3
    longest = max(later - earlier for earlier, later in itertools.pairwise(ticks))
    assert elapsed > 0.06, elapsed  # measurable: three solves of about 45 ms each, at least
    assert longest < elapsed / 4, (longest, elapsed)


async def test_pack_suggestor_solves_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    optimize = importlib.import_module("scipy.optimize")
    solve = optimize.linear_sum_assignment
    threads: list[int] = []

    def recording(*args: object, **kwargs: object) -> object:
        threads.append(threading.get_ident())
        return solve(*args, **kwargs)

    monkeypatch.setattr(optimize, "linear_sum_assignment", recording)
    await run_with(PackSuggestor(AssignmentPack(budget=10), SEEDS, STRATEGIES), STAFFING_SEED)
    assert threads
    assert threading.get_ident() not in threads
