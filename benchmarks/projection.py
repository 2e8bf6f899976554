"""The performance goals, projected from a comparison with the commit they started from.

The goals are absolute figures, set on the project's machine against the
starting commit, `4387133`. Another host runs everything faster or slower, so the suite's
own figures there say nothing about the goals: a faster host would show a goal as met that
the project's machine would not. What carries over is the ratio to `4387133`, timed in the
same process (`benchmarks.baseline`, the two engines alternated so that noise hits both).
A goal's projection is that ratio times the project machine's figure for `4387133`:

    python -m benchmarks.baseline 4387133 --rounds 100 --project

A goal counts as met only when the upper quartile of the per-round ratios projects within
its limit (W2, which has no per-round ratio over its floor, uses the ratio of the medians).

W1's engine share needs the replay of the run's user code, which reads private parts of the
context that `4387133` does not have. Its ratio is the current engine's share over
`4387133`'s whole cycle, round by round, so it is projected onto that machine's whole cycle at
the start (82.5 µs): the machine's pace is taken from the whole cycle, which both engines
run, and the share from the current engine alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, cast, final

from ._common import Figures, rounded

__all__ = ["GOALS", "ISSUE_GOALS", "ISSUE_START", "W1_ENGINE", "W1_TOTAL", "Goal", "project"]

ISSUE_START: Final = "4387133"
"""The commit the goals' starting figures were measured on."""

W1_TOTAL: Final = "total µs / cycle"
W1_ENGINE: Final = "engine µs / cycle (baseline: its total)"
"""W1's engine share in a comparison: the current run less its replayed user code, beside
the baseline's whole cycle (the earlier package cannot replay its own)."""

ISSUE_GOALS: Final = (
    ("W1_engine_us_per_cycle", "W1", "engine_us_per_cycle", 15.0),
    ("W1_total_us_per_cycle", "W1", "us_per_cycle", 60.0),
    ("W2_engine_over_floor_ms", "W2", "engine_over_floor_ms", 2.0),
    ("W3_us_per_fact", "W3", "us_per_fact", 5.0),
    ("W3_ratio_last10_first10", "W3", "ratio_last10_first10", 1.1),
    ("W3_peak_traced_mib", "W3", "peak_traced_reading_trace_mib", 10.0),  # the trace read too
    ("W4_us_per_cycle_1000", "W4", "us_per_cycle.1000", 25.0),
    ("W4_ratio_1000_to_1", "W4", "ratio_1000_to_1", 1.1),
)
"""The goals as `(name, workload, figure, limit)`, for the suite's `goals` block
(a figure in a nested object is named by its path, `"us_per_cycle.1000"`); the goals
projected below take their limits from here."""
_LIMITS: Final = {name: limit for name, _, _, limit in ISSUE_GOALS}


@final
@dataclass(frozen=True, slots=True)
class Goal:
    """One goal, as `benchmarks.baseline` measures its figure."""

    name: str
    """The name the suite's `goals` block gives it."""
    workload: str
    figure: str
    """The figure's name in the workload's part of the comparison."""
    at_start: float
    """The figure for `4387133` on the machine the goals were set on."""
    limit: float


def _goal(name: str, workload: str, figure: str, at_start: float) -> Goal:
    return Goal(name, workload, figure, at_start, _LIMITS[name])


GOALS: Final = (
    _goal("W1_total_us_per_cycle", "W1", W1_TOTAL, 82.5),
    _goal("W1_engine_us_per_cycle", "W1", W1_ENGINE, 82.5),
    _goal("W2_engine_over_floor_ms", "W2", "over the anyio floor ms", 7.6),
    _goal("W3_us_per_fact", "W3", "µs / fact", 10.0),
    _goal("W4_us_per_cycle_1000", "W4", "µs / cycle, 1000 registered", 33.5),
)
"""The goals a comparison with `ISSUE_START` projects."""


def project(report: Figures) -> Figures:
    """The goals `report` (a `benchmarks.baseline` comparison) measures, projected.

    Each goal whose workload the comparison timed is projected onto the project's machine;
    the goals of the workloads it did not time are left out.

    Raises:
        ValueError: `report` compares with another commit than the goals' starting one, or
            a workload's part lacks the figure its goal needs.
    """
    commit = str(report.get("ref_commit", ""))
    if not commit.startswith(ISSUE_START):
        raise ValueError(
            f"the goals can only be projected from a comparison with {ISSUE_START}, the "
            f"goals' starting commit, not with {commit or 'an unnamed commit'}"
        )
    projected: Figures = {}
    for goal in GOALS:
        if goal.workload in report:
            projected[goal.name] = _projected(goal, _part(report, goal.workload, goal.figure))
    return projected


def _part(figures: Figures, *path: str) -> Figures:
    """The set of figures at `path` in `figures` (a comparison as `compare` gives it)."""
    found = figures
    for name in path:
        value = found.get(name)
        if not isinstance(value, dict):
            raise ValueError(f"the comparison has no figures {' / '.join(path)!r} to project")
        found = cast("Figures", value)
    return found


def _number(figures: Figures, name: str, goal: Goal) -> float:
    value = figures.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{goal.workload}'s {goal.figure!r} has no number {name!r}")
    return float(value)


def _projected(goal: Goal, figure: Figures) -> Figures:
    """The projection of one figure: per-round ratios where the comparison has them."""
    if "ratio" in figure:
        ratio = _number(figure, "ratio", goal)
        quartiles = figure.get("ratio_quartiles")
        if not isinstance(quartiles, list) or len(cast("list[object]", quartiles)) != 2:
            raise ValueError(f"{goal.workload}'s {goal.figure!r} has no ratio quartiles")
        low, high = (float(cast("float", value)) for value in cast("list[object]", quartiles))
    else:  # W2: the ratio of the two medians over the floor
        baseline = _number(figure, "baseline", goal)
        if baseline <= 0:
            raise ValueError(f"{goal.workload}'s {goal.figure!r} is not positive at {ISSUE_START}")
        ratio = low = high = _number(figure, "current", goal) / baseline
    return {
        "ratio": rounded(ratio, 3),
        "at_start": goal.at_start,
        "projected": rounded(ratio * goal.at_start, 2),
        "projected_quartiles": [rounded(low * goal.at_start, 2), rounded(high * goal.at_start, 2)],
        "limit": goal.limit,
        "met": high * goal.at_start <= goal.limit,
    }
