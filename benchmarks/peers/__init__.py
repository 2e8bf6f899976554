"""W1-W4 on LangGraph, run alternately with converge's W1-W4: `python -m benchmarks --peers`.

The modules here import LangGraph (the `bench-peers` dependency group); this package's
`__init__` does not, so the suite runs without it and `--peers` can say how to install it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final, cast

from .._common import Figures, Settings
from ._compare import INSTALL, PINNED, langgraph_version, reference_row, row, table

__all__ = [
    "INSTALL",
    "PINNED",
    "WORKLOADS",
    "langgraph_version",
    "measure",
    "reference_row",
    "row",
    "table",
]

WORKLOADS: Final = {
    "W1": ("chain", "chain_static"),
    "W2": ("fanout",),
    "W3": ("growth",),
    "W4": ("wide_idle",),
}
"""The workloads with a LangGraph twin, and the modules in this package that hold it: W1 has
two shapes, the twin of converge's design (every node routed by 200 predicates) and the one a
LangGraph user would write (a chain of static edges)."""


def measure(workload: str, settings: Settings) -> Figures:
    """Run one workload on converge and LangGraph, alternating, and return its figures.

    With two shapes, the first shape's figures hold the second's under its module's name
    (`"chain_static"`), and `"rows"` holds the rows of both.
    """
    first, *others = WORKLOADS[workload]
    figures = _measure(first, settings)
    rows = list(cast(list[Figures], figures["rows"]))
    for name in others:
        shape = _measure(name, settings)
        rows.extend(cast(list[Figures], shape["rows"]))
        figures[name] = shape
    return {**figures, "rows": rows}


def _measure(module_name: str, settings: Settings) -> Figures:
    module = importlib.import_module(f"{__name__}.{module_name}")
    run = cast(Callable[[Settings], Figures], module.measure)
    return run(settings)
