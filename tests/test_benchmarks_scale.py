"""W8's figures over its rounds: reads only in some rounds, ratios taken pair by pair."""

from __future__ import annotations

from benchmarks import scale
from benchmarks._common import Figures


def test_a_figure_is_the_median_of_the_rounds_that_measured_it() -> None:
    rounds: list[Figures] = [
        {"engine_s": 2.0, "run_s": 3.0, "show_s": 0.3},
        {"engine_s": 4.0, "run_s": 5.0},
        {"engine_s": 3.0, "run_s": 4.0, "show_s": 0.5},
    ]
    assert scale._medians(rounds) == {"engine_s": 3.0, "run_s": 4.0, "show_s": 0.4}  # pyright: ignore[reportPrivateUsage]


def test_the_ratio_is_the_median_of_each_pairs_own() -> None:
    # the pairs say 1.5, 1.25 and 1.2; the medians' ratio, 3.6 / 3.0, would say 1.2
    rounds: list[Figures] = [
        {"engine_s": 2.0, "run_s": 3.0},
        {"engine_s": 4.0, "run_s": 5.0},
        {"engine_s": 3.0, "run_s": 3.6},
    ]
    assert scale._ratio(rounds, "run_s", "engine_s") == 1.25  # pyright: ignore[reportPrivateUsage]
