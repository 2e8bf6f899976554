"""`python -m benchmarks`: run the selected workloads and print one JSON object to stdout.

Options: `--quick` takes 5 runs per figure instead of 21 (workload sizes never change);
`--only W1,W3` selects workloads; `--runs N` sets the runs per figure (at least 5).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Final

from . import assignment, batch, chain, durability, fanout, growth, wide_idle
from ._common import MIN_RUNS, Figures, Settings, machine, progress

WORKLOADS: Final[dict[str, Callable[[Settings], Figures]]] = {
    "W1": chain.measure,
    "W2": fanout.measure,
    "W3": growth.measure,
    "W4": wide_idle.measure,
    "W5": durability.measure,
    "W6": assignment.measure,
    "W7": batch.measure,
}

# (name, workload, figure, limit): a target is met when the figure is at most the limit.
TARGETS: Final = (
    ("W1_engine_us_per_cycle", "W1", "engine_us_per_cycle", 50.0),
    ("W1_total_us_per_cycle", "W1", "us_per_cycle", 50.0),
    ("W2_wall_ms", "W2", "wall_ms", 25.0),
    ("W3_ratio_last10_first10", "W3", "ratio_last10_first10", 1.2),
    ("W4_ratio_1000_to_1", "W4", "ratio_1000_to_1", 1.2),
    ("W5_sqlite_normal_save_ms", "W5", "sqlite_normal_save_ms", 2.0),
    ("W5_sqlite_full_save_ms", "W5", "sqlite_full_save_ms", 2.0),
    ("W5_postgres_save_ms", "W5", "postgres_save_ms", 5.0),
    ("W5_sqlite_normal_ratio_last20_first20", "W5", "sqlite_normal_ratio_last20_first20", 1.2),
    ("W5_sqlite_full_ratio_last20_first20", "W5", "sqlite_full_ratio_last20_first20", 1.2),
    ("W5_postgres_ratio_last20_first20", "W5", "postgres_ratio_last20_first20", 1.2),
    ("W5_bytes_ratio_finished", "W5", "bytes_ratio_finished", 1.5),
    ("W5_bytes_ratio_in_progress", "W5", "bytes_ratio_in_progress", 1.5),
    ("W6_referenced_ratio", "W6", "referenced_ratio", 3.0),
)


def _selection(text: str) -> list[str]:
    names = [part.strip().upper() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(WORKLOADS)}"
        )
    return sorted(set(names), key=list(WORKLOADS).index)


def _runs(text: str) -> int:
    runs = int(text)
    if runs < MIN_RUNS:
        raise argparse.ArgumentTypeError(f"at least {MIN_RUNS} runs per figure, got {runs}")
    return runs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="converge performance suite: prints one JSON object to stdout.",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{MIN_RUNS} runs per figure instead of 21"
    )
    parser.add_argument(
        "--only",
        type=_selection,
        default=list(WORKLOADS),
        metavar="W1,W3",
        help="comma-separated workloads to run (default: all)",
    )
    parser.add_argument("--runs", type=_runs, default=None, help="runs per figure (>= 5)")
    return parser


def _targets(measured: dict[str, Figures]) -> Figures:
    targets: Figures = {}
    for name, workload, figure, limit in TARGETS:
        value = measured.get(workload, {}).get(figure)
        if not isinstance(value, float | int):
            continue
        targets[name] = {"value": value, "limit": limit, "met": value <= limit}
    return targets


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the workloads, print the JSON report; the exit status is 0."""
    options = _parser().parse_args(argv)
    settings = Settings.of(quick=options.quick, runs=options.runs)
    selected: list[str] = options.only
    results: Figures = {
        "suite": "converge benchmarks",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": settings.quick,
        "sizes": "full",
        "runs_per_figure": settings.runs,
        "statistic": "median",
        "machine": machine(),
    }
    measured = {name: WORKLOADS[name](settings) for name in selected}
    results.update(measured)
    results["targets"] = _targets(measured)
    progress("done")
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
