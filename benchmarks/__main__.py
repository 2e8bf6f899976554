"""`python -m benchmarks`: run the selected workloads and print one JSON object to stdout.

Options: `--quick` takes 5 runs per figure instead of 21 (workload sizes never change);
`--only W1,W3` selects workloads; `--runs N` sets the runs per figure (at least 5).
`python -m benchmarks W8` (workloads named without `--only`) runs those; `--full` gives W8
its 1,000,000-fact round and its 10,000-run store.
`--peers` runs W1-W4 (or the `--only` selection among them) on converge and on LangGraph,
alternating run by run, and prints a comparison table on stderr besides the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Final, cast

from . import assignment, batch, chain, durability, fanout, growth, peers, scale, wide_idle
from ._common import MIN_RUNS, Figures, Settings, machine, progress
from .projection import ISSUE_GOALS

WORKLOADS: Final[dict[str, Callable[[Settings], Figures]]] = {
    "W1": chain.measure,
    "W2": fanout.measure,
    "W3": growth.measure,
    "W4": wide_idle.measure,
    "W5": durability.measure,
    "W6": assignment.measure,
    "W7": batch.measure,
    "W8": scale.measure,
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
        default=None,
        metavar="W1,W3",
        help="comma-separated workloads to run (default: all; with --peers: W1-W4)",
    )
    parser.add_argument("--runs", type=_runs, default=None, help="runs per figure (>= 5)")
    parser.add_argument(
        "workloads", nargs="?", type=_selection, default=None, metavar="W8", help="as --only"
    )
    parser.add_argument(
        "--full", action="store_true", help="W8 also at 1,000,000 facts and 10,000 stored runs"
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="run W1-W4 on converge and LangGraph alternately and compare them "
        f"(needs: {peers.INSTALL})",
    )
    return parser


def _figure(figures: Figures, path: str) -> object:
    """The figure at `path` ("us_per_cycle.1000" names one inside a nested object)."""
    *outer, last = path.split(".")
    current: Figures | None = figures
    for part in outer:
        nested = None if current is None else current.get(part)
        current = cast(Figures, nested) if isinstance(nested, dict) else None
    return None if current is None else current.get(last)


def _targets(
    measured: dict[str, Figures], limits: Sequence[tuple[str, str, str, float]] = TARGETS
) -> Figures:
    """Each limit of `limits` whose workload ran, with its figure and whether it is met."""
    targets: Figures = {}
    for name, workload, figure, limit in limits:
        value = _figure(measured.get(workload, {}), figure)
        if not isinstance(value, float | int):
            continue
        targets[name] = {"value": value, "limit": limit, "met": value <= limit}
    return targets


def _peers(version: str, chosen: Sequence[str], settings: Settings, results: Figures) -> None:
    """Run the peer comparison of `chosen` into `results` and print its table on stderr."""
    if version != peers.PINNED:
        progress(f"LangGraph {version} is installed; the figures in the README use {peers.PINNED}")
    results["peers"] = {"langgraph": version, "order": "converge, LangGraph, every round"}
    rows: list[Figures] = []
    for name in chosen:
        figures = peers.measure(name, settings)
        results[name] = figures
        rows.extend(cast(list[Figures], figures["rows"]))
    machine = cast(Figures, results["machine"])
    lines = peers.table(rows, machine=machine, runs=settings.runs, version=version)
    results["table"] = lines
    progress("done")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _peer_selection(selected: list[str] | None) -> tuple[str, list[str]] | None:
    """LangGraph's version and the workloads to compare, or `None` after saying what is wrong."""
    version = peers.langgraph_version()
    if version is None:
        progress(
            f"--peers needs LangGraph, which is not installed; install it with: {peers.INSTALL}"
        )
        return None
    chosen = selected or list(peers.WORKLOADS)
    others = [name for name in chosen if name not in peers.WORKLOADS]
    if others:
        progress(f"--peers compares {', '.join(peers.WORKLOADS)} only, not {', '.join(others)}")
        return None
    return version, chosen


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the workloads, print the JSON report; the exit status is 0.

    With `--peers` and no LangGraph installed, it prints how to install it and returns 2.
    """
    options = _parser().parse_args(argv)
    settings = Settings.of(quick=options.quick, runs=options.runs)
    selected: list[str] | None = options.only or options.workloads
    if options.full:
        os.environ["CONVERGE_W8_FULL"] = "1"
    peer_run = _peer_selection(selected) if options.peers else None
    if options.peers and peer_run is None:
        return 2
    results: Figures = {
        "suite": "converge benchmarks",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": settings.quick,
        "sizes": "full",
        "runs_per_figure": settings.runs,
        "statistic": "median",
        "machine": machine(),
    }
    if peer_run is not None:
        _peers(*peer_run, settings, results)
        json.dump(results, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    measured = {name: WORKLOADS[name](settings) for name in selected or WORKLOADS}
    results.update(measured)
    results["targets"] = _targets(measured)
    results["goals"] = _targets(measured, ISSUE_GOALS)
    progress("done")
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
