"""A batch's defaults: `converge.dask` takes them, and `converge batch --help` shows them
without importing the engine."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_RUNS_PER_WORKER", "DEFAULT_WORKER_TIMEOUT"]

DEFAULT_RUNS_PER_WORKER: Final = 32
"""Runs a worker task runs at once: sized for model-bound formations (set 1 for CPU-bound)."""
DEFAULT_WORKER_TIMEOUT: Final = 30.0
"""Seconds a batch waits for its cluster to have a worker."""
