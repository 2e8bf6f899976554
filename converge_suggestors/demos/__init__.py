"""The bundled demos: formations that run offline and end the same way every time.

Each demo is a module of this package with a module-level `formation` (a
[`Formation`][converge.Formation]); `converge demo NAME` imports
`converge_suggestors.demos.NAME` and runs it, and `examples/NAME.py` in the repository shows
the same formation as a plain script. Importing this package imports no demo: load one by
name, for example with `importlib.import_module(f"converge_suggestors.demos.{name}")`.
"""

from __future__ import annotations

__all__ = ["DEMOS"]

DEMOS: tuple[str, ...] = (
    "hello_convergence",
    "loan_application",
    "fixed_point_vs_budget",
    "adaptive_gap_loop",
    "reconciliation",
    "vendor_selection",
)
"""The names of the demo modules, from the simplest to the richest."""
