"""`benchmarks/projection.py`: the performance goals projected from a comparison with 4387133."""

from typing import cast

import pytest

from benchmarks._common import Figures
from benchmarks.projection import ISSUE_START, W1_ENGINE, W1_TOTAL, project


def _ratio(ratio: float, low: float, high: float) -> Figures:
    return {
        "baseline": 10.0,
        "current": 10.0 * ratio,
        "ratio": ratio,
        "ratio_quartiles": [low, high],
    }


def _report(**parts: object) -> Figures:
    return {"suite": "baseline", "ref": ISSUE_START, "ref_commit": ISSUE_START, **parts}


def _goal(projected: Figures, name: str) -> Figures:
    figures = projected[name]
    assert isinstance(figures, dict)
    return cast("Figures", figures)


def test_a_ratio_is_projected_onto_the_issues_figure_for_its_starting_commit() -> None:
    report = _report(W1={W1_TOTAL: _ratio(0.7, 0.69, 0.71), W1_ENGINE: _ratio(0.3, 0.3, 0.3)})
    goal = _goal(project(report), "W1_total_us_per_cycle")
    assert goal["projected"] == pytest.approx(57.75)  # 0.7 x 82.5
    assert goal["projected_quartiles"] == pytest.approx([56.93, 58.58], abs=0.01)
    assert goal["limit"] == 60.0
    assert goal["met"] is True


def test_a_goal_is_met_only_when_the_upper_quartile_projects_within_its_limit() -> None:
    # the median projects to 59.4 (within 60), the upper quartile to 61.9 (over it)
    report = _report(W1={W1_TOTAL: _ratio(0.72, 0.70, 0.75), W1_ENGINE: _ratio(0.3, 0.3, 0.3)})
    goal = _goal(project(report), "W1_total_us_per_cycle")
    assert goal["projected"] == pytest.approx(59.4)
    assert goal["met"] is False


def test_w2_is_projected_from_the_ratio_of_its_medians_over_the_floor() -> None:
    report = _report(W2={"over the anyio floor ms": {"baseline": 8.0, "current": 2.0}})
    goal = _goal(project(report), "W2_engine_over_floor_ms")
    assert goal["ratio"] == 0.25
    assert goal["projected"] == pytest.approx(1.9)  # 0.25 x 7.6
    assert goal["met"] is True


def test_only_the_measured_workloads_are_projected() -> None:
    projected = project(_report(W3={"µs / fact": _ratio(0.6, 0.58, 0.62)}))
    assert set(projected) == {"W3_us_per_fact"}
    assert _goal(projected, "W3_us_per_fact")["met"] is False  # 6.2 against 5


def test_w1s_engine_share_is_projected_as_a_part_of_the_issues_whole_cycle() -> None:
    # the current engine's share is 0.2 of 4387133's whole cycle, round by round
    report = _report(W1={W1_TOTAL: _ratio(0.6, 0.59, 0.61), W1_ENGINE: _ratio(0.2, 0.19, 0.21)})
    projected = project(report)
    assert set(projected) == {"W1_total_us_per_cycle", "W1_engine_us_per_cycle"}
    engine = _goal(projected, "W1_engine_us_per_cycle")
    assert engine["at_start"] == 82.5  # the whole cycle's, not the engine's 38.1
    assert engine["projected"] == pytest.approx(16.5)
    assert engine["limit"] == 15.0
    assert engine["met"] is False
    report = _report(W1={W1_TOTAL: _ratio(0.6, 0.59, 0.61), W1_ENGINE: _ratio(0.17, 0.16, 0.18)})
    assert _goal(project(report), "W1_engine_us_per_cycle")["met"] is True  # 14.85


def test_a_comparison_with_another_commit_is_refused() -> None:
    report = {**_report(W1={"total µs / cycle": _ratio(0.7, 0.69, 0.71)}), "ref_commit": "1391f8b"}
    with pytest.raises(ValueError, match=rf"only be projected .*{ISSUE_START}.* not with 1391f8b"):
        project(report)


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"W1": {}}, "no figures 'W1 / total µs / cycle'"),
        ({"W1": {W1_TOTAL: _ratio(0.6, 0.59, 0.61)}}, r"no figures 'W1 / engine µs / cycle \(b"),
        ({"W4": {"µs / cycle, 1000 registered": {"ratio": 0.6}}}, "no ratio quartiles"),
        ({"W3": {"µs / fact": {"ratio": "0.6", "ratio_quartiles": [0.5, 0.7]}}}, "no number"),
        ({"W2": {"over the anyio floor ms": {"baseline": 0.0, "current": 1.0}}}, "not positive"),
    ],
)
def test_a_comparison_without_the_figure_a_goal_needs_names_it(part: Figures, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        project(_report(**part))
