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

WORKLOADS: Final = {"W1": "chain", "W2": "fanout", "W3": "growth", "W4": "wide_idle"}
"""The workloads with a LangGraph twin, and the module in this package that holds it."""


def measure(workload: str, settings: Settings) -> Figures:
    """Run one workload on converge and LangGraph, alternating, and return its figures."""
    module = importlib.import_module(f"{__name__}.{WORKLOADS[workload]}")
    run = cast(Callable[[Settings], Figures], module.measure)
    return run(settings)
