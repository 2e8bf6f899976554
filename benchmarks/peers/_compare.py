"""What the peer workloads share: LangGraph's presence, paired rows, and the printed table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import metadata, util
from typing import Final, cast

from .._common import Figures, median, quartiles, rounded

__all__ = [
    "INSTALL",
    "PINNED",
    "RECURSION_LIMIT",
    "check",
    "langgraph_version",
    "reference_row",
    "row",
    "table",
]

PINNED: Final = "1.2.24"
"""The LangGraph version the `bench-peers` dependency group pins."""

INSTALL: Final = f'pip install --group bench-peers  (or: pip install "langgraph=={PINNED}")'
"""How to install the peer, for the message `--peers` prints without it."""

RECURSION_LIMIT: Final = 1000
"""LangGraph's superstep limit for every peer run: converge's `Budget(max_cycles=1000)`."""


def langgraph_version() -> str | None:
    """The installed LangGraph's version, or `None` when it cannot be imported."""
    if util.find_spec("langgraph") is None:
        return None
    try:
        return metadata.version("langgraph")
    except metadata.PackageNotFoundError:
        return None


def check(workload: str, condition: bool, detail: object) -> None:
    """Fail loudly when a peer run did not run as designed."""
    if not condition:
        raise RuntimeError(f"{workload} (LangGraph) did not run as designed: {detail!r}")


def _paired_ratio(converge: Sequence[float], langgraph: Sequence[float]) -> float:
    """The median over rounds of LangGraph's figure over converge's figure of the same round."""
    return rounded(median([lg / cv for cv, lg in zip(converge, langgraph, strict=True)]), 2)


def row(
    workload: str,
    figure: str,
    converge: Sequence[float],
    langgraph: Sequence[float],
    *,
    ratio: bool = True,
) -> Figures:
    """One figure on both engines: medians, quartiles and (for costs) the paired ratio."""
    return {
        "workload": workload,
        "figure": figure,
        "converge": rounded(median(converge), 3),
        "converge_quartiles": quartiles(converge),
        "langgraph": rounded(median(langgraph), 3),
        "langgraph_quartiles": quartiles(langgraph),
        "ratio": _paired_ratio(converge, langgraph) if ratio else None,
    }


def reference_row(workload: str, figure: str, values: Sequence[float]) -> Figures:
    """A figure of neither engine (a floor), timed in the same rounds."""
    return {
        "workload": workload,
        "figure": figure,
        "reference": rounded(median(values), 3),
        "reference_quartiles": quartiles(values),
    }


def _number(value: object) -> str:
    if not isinstance(value, float | int):
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(figures: Figures, engine: str) -> str:
    spread = cast(list[float] | None, figures.get(f"{engine}_quartiles"))
    low, high = spread or (None, None)
    return f"{_number(figures.get(engine))} [{_number(low)}, {_number(high)}]"


def _line(figures: Figures) -> tuple[str, str, str, str, str]:
    workload, figure = str(figures["workload"]), str(figures["figure"])
    if "reference" in figures:
        return workload, figure, _cell(figures, "reference"), "(reference)", ""
    ratio = figures.get("ratio")
    shown = f"{_number(ratio)}\N{MULTIPLICATION SIGN}" if isinstance(ratio, float | int) else "—"
    return workload, figure, _cell(figures, "converge"), _cell(figures, "langgraph"), shown


def table(rows: Sequence[Figures], *, machine: Figures, runs: int, version: str) -> list[str]:
    """The comparison as aligned text lines, headed by the versions and the machine's load."""
    load = machine.get("load_average_at_start")
    busy = machine.get("cpu_busy_before_start")
    end = [round(value, 2) for value in os.getloadavg()]
    header = [
        f"converge vs LangGraph {version}: medians [quartiles] of {runs} runs per engine, "
        "alternated run by run; ratio = LangGraph / converge (median over rounds)",
        f"machine: {machine.get('implementation')} {machine.get('python')}, "
        f"{machine.get('cpu_count')} CPUs, {machine.get('platform')}; load average {load} "
        f"at start, {end} at end; CPUs {busy} busy before start",
    ]
    lines = [("workload", "figure", "converge", "LangGraph", "ratio"), *map(_line, rows)]
    widths = [max(len(line[column]) for line in lines) for column in range(5)]
    body = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    return [*header, *body]
