"""Fixed point or budget: one formation, converging with room to finish, stopped without.

A refiner improves an estimate of √2 with Heron's method, one step per cycle, each step a
new fact citing the one before; once two successive estimates agree within the tolerance it
stops, and a judge records the answer. With the generous budget of `formation` the run
reaches its fixed point in 7 cycles and converges. `tight_formation` is the same formation
with `max_cycles=4`: the run stops with `CYCLE_BUDGET_EXHAUSTED` and keeps its partial work
(four estimates, no answer). `with_budget(n)` builds any other variant.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final, final

from pydantic import BaseModel, ConfigDict

from converge import (
    Budget,
    Context,
    ContextKey,
    Fact,
    Formation,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    suggestor,
)

__all__ = [
    "GENEROUS_CYCLES",
    "TIGHT_CYCLES",
    "Problem",
    "formation",
    "tight_formation",
    "with_budget",
]

GENEROUS_CYCLES: Final = 20
"""`max_cycles` of `formation`: room to reach the fixed point (7 cycles)."""
TIGHT_CYCLES: Final = 4
"""`max_cycles` of `tight_formation`: not enough, so the budget stops the run."""

_PROBLEM_ID: Final = "problem"
_ANSWER_ID: Final = "answer"


@final
class Problem(BaseModel, frozen=True):
    """The input: which square root to approximate, from where, and how closely."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    square: float
    """The number whose square root is wanted."""
    start: float
    """The first guess."""
    tolerance: float
    """Two successive estimates closer than this mean the estimate has settled."""


def _problem(ctx: Context) -> Problem | None:
    fact = ctx.find(ContextKey.SEEDS, _PROBLEM_ID)
    return None if fact is None else fact.payload_as(Problem)


def _value(fact: Fact) -> float:
    payload = fact.payload
    assert isinstance(payload, dict)
    value = payload["value"]
    assert isinstance(value, float)
    return value


def _settled(ctx: Context, problem: Problem) -> bool:
    estimates = ctx.get(ContextKey.HYPOTHESES)
    if len(estimates) < 2:
        return False
    return abs(_value(estimates[-1]) - _value(estimates[-2])) <= problem.tolerance


def _refiner_accepts(ctx: Context) -> bool:
    problem = _problem(ctx)
    return problem is not None and not _settled(ctx, problem)


@suggestor(
    name="refiner",
    dependencies=[ContextKey.SEEDS, ContextKey.HYPOTHESES],
    accepts=_refiner_accepts,
    writes=[ContextKey.HYPOTHESES],
)
async def _refiner(ctx: Context) -> list[ProposedFact]:
    """One Heron step: the next estimate is the mean of x and square / x."""
    problem = _problem(ctx)
    assert problem is not None
    estimates = ctx.get(ContextKey.HYPOTHESES)
    if estimates:
        previous, source = _value(estimates[-1]), estimates[-1].ref
    else:
        previous, source = problem.start, f"seeds/{_PROBLEM_ID}"
    step = len(estimates) + 1
    value = (previous + problem.square / previous) / 2
    return [
        ProposedFact(
            key=ContextKey.HYPOTHESES,
            id=f"x{step}",
            content=f"x{step} = {value:.12f}",
            payload={"step": step, "value": value},
            provenance="refiner",
            evidence=(source,),
        )
    ]


def _judge_accepts(ctx: Context) -> bool:
    problem = _problem(ctx)
    return (
        problem is not None
        and _settled(ctx, problem)
        and ctx.find(ContextKey.EVALUATIONS, _ANSWER_ID) is None
    )


@suggestor(
    name="judge",
    dependencies=[ContextKey.HYPOTHESES],
    accepts=_judge_accepts,
    writes=[ContextKey.EVALUATIONS],
)
async def _judge(ctx: Context) -> list[ProposedFact]:
    """Once the estimate has settled, record it as the answer."""
    problem = _problem(ctx)
    assert problem is not None
    last = ctx.get(ContextKey.HYPOTHESES)[-1]
    return [
        ProposedFact(
            key=ContextKey.EVALUATIONS,
            id=_ANSWER_ID,
            content=f"sqrt({problem.square:g}) = {_value(last):.12f} (settled at {last.id})",
            payload={"value": _value(last)},
            provenance="judge",
            evidence=(last.ref,),
        )
    ]


@final
class _HasAnswer:
    """ACCEPTANCE: a converged run has recorded an answer."""

    name = "has-answer"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        if ctx.find(ContextKey.EVALUATIONS, _ANSWER_ID) is None:
            return InvariantResult.violated("no answer recorded")
        return InvariantResult.ok()


def with_budget(max_cycles: int) -> Formation:
    """The formation with a cycle budget of `max_cycles`: 7 or more converges, less stops."""
    return dataclasses.replace(formation, budget=Budget(max_cycles=max_cycles))


formation: Formation = Formation(
    name="fixed_point_vs_budget",
    description=(
        "Heron's method for the square root of 2, one step per cycle, until two estimates "
        "agree: converges in 7 cycles with a generous budget, stops with a tight one."
    ),
    suggestors=(_refiner, _judge),
    invariants=(_HasAnswer(),),
    budget=Budget(max_cycles=GENEROUS_CYCLES),
    inputs=(
        ProposedFact(
            key=ContextKey.SEEDS,
            id=_PROBLEM_ID,
            content="Approximate the square root of 2, from 1, until two estimates agree to 1e-9",
            payload=Problem(square=2.0, start=1.0, tolerance=1e-9).model_dump(),
            provenance="input:demo",
        ),
    ),
)
"""`max_cycles=20`: converges in 7 cycles (5 estimates, then the answer, then a fixed point)."""

tight_formation: Formation = with_budget(TIGHT_CYCLES)
"""The same formation with `max_cycles=4`: `CYCLE_BUDGET_EXHAUSTED` after 4 estimates."""
