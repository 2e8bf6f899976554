"""What every workload shares: run settings, timing helpers, and the machine description."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final, final

from converge import ConvergeResult

__all__ = [
    "MIN_RUNS",
    "Figures",
    "Memory",
    "Settings",
    "machine",
    "median",
    "prepare",
    "progress",
    "quartiles",
    "read_proof",
    "rounded",
    "traced_memory",
    "warm_run",
]

Figures = dict[str, object]
"""A workload's results: a JSON object (str keys; numbers, strings, bools, nested objects)."""

MIN_RUNS: Final = 5
"""The fewest timed runs behind any reported median."""


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """How hard to measure: `runs` timed repetitions per figure, after `warmups` untimed ones."""

    runs: int
    warmups: int
    quick: bool

    @classmethod
    def of(cls, *, quick: bool, runs: int | None = None) -> Settings:
        """The settings for a full run (21 repetitions) or a `--quick` one (5)."""
        default = MIN_RUNS if quick else 21
        return cls(runs=max(MIN_RUNS, runs or default), warmups=1 if quick else 2, quick=quick)


def median(values: Sequence[float]) -> float:
    """The median of `values` (which must not be empty)."""
    return statistics.median(values)


def quartiles(values: Sequence[float], scale: float = 1.0) -> list[float]:
    """The first and third quartiles of `values` times `scale`, rounded: the spread of runs."""
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return [rounded(first * scale), rounded(third * scale)]


def rounded(value: float, digits: int = 2) -> float:
    """`value` rounded for the report."""
    return round(value, digits)


def prepare() -> None:
    """Start a timed run from a clean heap, so one run's garbage is not charged to the next."""
    gc.collect()


def read_proof(result: ConvergeResult) -> float:
    """Seconds of the first read of `result.integrity`, which builds the proof.

    The proof is the Merkle tree over the run's leaves: a run whose proof nobody reads
    never pays it.

    Raises:
        RuntimeError: The proof does not count the run's facts (it was not the run's).
    """
    started = time.perf_counter()
    proof = result.integrity
    seconds = time.perf_counter() - started
    if proof.fact_count != len(result.context):
        raise RuntimeError(f"the proof counts {proof.fact_count} facts, not {len(result.context)}")
    return seconds


async def warm_run(
    run: Callable[[], Awaitable[ConvergeResult]], check: Callable[[ConvergeResult], int]
) -> float:
    """Seconds of `run()` straight after a timed run of the same work, its result checked.

    `prepare()`'s full collection walks every object of the heap, and whatever runs next
    starts with cold caches: about 0.3 ms more on this machine, an unrelated workload's
    too. This runs again at once, after `gc.collect(1)` (which walks only the young
    objects and leaves the caches warm): its difference from the timed run is that cold
    start, paid once per run, not per cycle.
    """
    gc.collect(1)
    started = time.perf_counter()
    result = await run()
    seconds = time.perf_counter() - started
    check(result)
    return seconds


@final
@dataclass(frozen=True, slots=True)
class Memory:
    """What one run allocated, traced (`tracemalloc`), in bytes."""

    retained: int
    """What its result still holds at the end (the result alive, its trace not read)."""
    peak: int
    """The peak during the run."""
    with_trace: int
    """What the result holds once its trace is read (built on that first read)."""
    peak_reading: int
    """The peak while the trace is built."""


async def traced_memory(
    run: Callable[[], Awaitable[ConvergeResult]], check: Callable[[ConvergeResult], int]
) -> Memory:
    """Trace one `run()` from a clean heap; `check` its result and return its cycle count.

    Raises:
        RuntimeError: The run's trace does not hold as many cycles as `check` counted.
    """
    prepare()
    tracemalloc.start()
    try:
        kept = await run()
        retained, peak = tracemalloc.get_traced_memory()  # `kept` holds the context
        cycles = check(kept)
        tracemalloc.reset_peak()
        traced = kept.trace  # built on its first read: what a user who reads it holds too
        with_trace, peak_reading = tracemalloc.get_traced_memory()
        if len(traced.cycles) != cycles:
            raise RuntimeError(f"the run's trace has {len(traced.cycles)} cycles, not {cycles}")
    finally:
        tracemalloc.stop()
    return Memory(retained, peak, with_trace, peak_reading)


def progress(message: str) -> None:
    """Report progress on stderr; stdout carries only the JSON result."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _source() -> Figures:
    """The git commit of the working tree, and whether it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "converge"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "converge_modified": None}
    return {"commit": commit, "converge_modified": bool(status.strip())}


def _busy(seconds: float = 0.5) -> float | None:
    """The fraction of all CPUs busy over the next `seconds` (Linux only; else `None`)."""

    def sample() -> tuple[int, int]:
        fields = [int(field) for field in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    try:
        busy0, total0 = sample()
        time.sleep(seconds)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return round((busy1 - busy0) / max(total1 - total0, 1), 3)


def machine() -> Figures:
    """The interpreter, platform, CPU count, load, library versions and source revision."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
        "cpu_busy_before_start": _busy(),
        "versions": {
            name: _version(name) for name in ("converge", "anyio", "pydantic", "pydantic-core")
        },
        "source": _source(),
    }
