"""W6 assignment: one engine run of `AssignmentSuggestor` on a 1000 x 1000 matrix, against SciPy.

The matrix is uniform random in [0, 1) from a fixed seed. Three things are timed, alternated
round by round (the order rotates each round):

- `bare`: `scipy.optimize.linear_sum_assignment` on the numpy matrix, nothing else;
- `referenced`: the matrix registered with `AssignmentSuggestor.add_costs` (a float64 copy and
  its SHA-256), a problem fact naming it by `costs_digest`, and one `engine.run`;
- `inline`: the matrix as JSON in the problem fact's payload (`costs`, a list of 1,000 lists
  of 1,000 floats, built untimed): the proposal's validation and one `engine.run`, with
  `max_payload_bytes` raised to 64 MiB (the JSON is about 19 MB; the default limit is 1 MiB).

A further run of each engine with a task ticking every 5 ms beside it gives the longest gap
between ticks: how long the event loop was blocked.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import math
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Final, Protocol, cast

import anyio
from pydantic import JsonValue

from converge import (
    ContextKey,
    ConvergeResult,
    Engine,
    PromotionPolicy,
    ProposedFact,
    StopReason,
)
from converge_suggestors import AssignmentSuggestor

from ._common import Figures, Settings, median, prepare, progress, quartiles, rounded

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["measure"]

SIZE: Final = 1000
SEED: Final = 20261201
TICK: Final = 0.005
_ROWS: Final = tuple(f"w{i}" for i in range(SIZE))
_COLUMNS: Final = tuple(f"t{j}" for j in range(SIZE))


class _Indices(Protocol):
    def tolist(self) -> list[int]: ...


class _Solver(Protocol):
    def __call__(self, matrix: NDArray[np.float64], /) -> tuple[_Indices, _Indices]: ...


def _problem(payload: dict[str, JsonValue]) -> ProposedFact:
    return ProposedFact(
        key=ContextKey.SEEDS,
        id="staffing",
        content="who does what",
        payload=payload,
        provenance="input:bench",
    )


def _check(result: ConvergeResult, expected: float) -> None:
    plan = result.context.find(ContextKey.STRATEGIES, "assignment:staffing")
    if result.stop_reason is not StopReason.CONVERGED or plan is None:
        raise RuntimeError(f"W6 did not run as designed: {result!r}")
    total = cast("dict[str, object]", plan.payload)["total_cost"]
    if not isinstance(total, float) or abs(total - expected) > 1e-9 * max(1.0, abs(expected)):
        raise RuntimeError(f"W6 found a total cost of {total!r}, SciPy {expected!r}")


async def _ticking(run: Callable[[], Awaitable[object]]) -> float:
    """The longest gap, in seconds, between ticks of a 5 ms ticker running beside `run`."""
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(perf_counter())
            await anyio.sleep(TICK)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(TICK)
        await run()
        ticks.append(perf_counter())
        group.cancel_scope.cancel()
    return max(later - earlier for earlier, later in itertools.pairwise(ticks))


async def _measure(settings: Settings) -> Figures:
    import numpy as np  # SciPy is installed, so numpy is

    solver = cast("_Solver", importlib.import_module("scipy.optimize").linear_sum_assignment)
    matrix = np.random.default_rng(SEED).random((SIZE, SIZE))
    as_lists: list[JsonValue] = matrix.tolist()
    rows, columns = solver(matrix)
    expected = math.fsum(matrix[rows.tolist(), columns.tolist()].tolist())

    # 1,000 x 1,000 numbers are about 19 MB of JSON: over the default 1 MiB payload limit
    inline_engine = Engine(policy=PromotionPolicy(max_payload_bytes=64 * 1024 * 1024))
    referenced_engine = Engine()
    referenced = AssignmentSuggestor(ContextKey.SEEDS)
    inline_engine.register_suggestor(AssignmentSuggestor(ContextKey.SEEDS))
    referenced_engine.register_suggestor(referenced)
    labels: dict[str, JsonValue] = {"rows": list(_ROWS), "columns": list(_COLUMNS)}

    async def bare() -> None:
        solver(matrix)

    async def inline() -> None:
        _check(await inline_engine.run(inputs=[_problem({**labels, "costs": as_lists})]), expected)

    async def by_reference() -> None:
        digest = referenced.add_costs(matrix)
        fact = _problem({**labels, "costs_digest": digest})
        _check(await referenced_engine.run(inputs=[fact]), expected)

    modes: dict[str, Callable[[], Awaitable[None]]] = {
        "bare": bare,
        "referenced": by_reference,
        "inline": inline,
    }
    for _ in range(settings.warmups):
        for run in modes.values():
            await run()
    times: dict[str, list[float]] = {name: [] for name in modes}
    order = list(modes)
    for round_ in range(settings.runs):
        for name in order[round_ % len(order) :] + order[: round_ % len(order)]:
            prepare()
            started = perf_counter()
            await modes[name]()
            times[name].append(perf_counter() - started)
    gaps = {name: await _ticking(modes[name]) for name in modes if name != "bare"}
    return _figures(times, gaps)


def _figures(times: dict[str, list[float]], gaps: dict[str, float]) -> Figures:
    bare = times["bare"]
    figures: Figures = {
        "size": f"{SIZE}x{SIZE}",
        "runs": len(bare),
        "bare_ms": rounded(median(bare) * 1e3),
        "bare_ms_quartiles": quartiles(bare, 1e3),
    }
    for name, runs in times.items():
        if name == "bare":
            continue
        ratios = [run / alone for run, alone in zip(runs, bare, strict=True)]
        figures[f"{name}_ms"] = rounded(median(runs) * 1e3)
        figures[f"{name}_ms_quartiles"] = quartiles(runs, 1e3)
        figures[f"{name}_ratio"] = rounded(median(ratios), 2)
        figures[f"{name}_max_loop_gap_ms"] = rounded(gaps[name] * 1e3)
    figures["ratio"] = "median over rounds of (end-to-end run time / bare solve time)"
    return figures


def measure(settings: Settings) -> Figures:
    """Run W6 and return its figures (a note instead when SciPy is not installed)."""
    if importlib.util.find_spec("scipy") is None:
        progress("W6 assignment: skipped, SciPy is not installed (the 'optimize' extra)")
        return {"skipped": "SciPy is not installed (pip install 'converge-engine[optimize]')"}
    progress(f"W6 assignment: {SIZE}x{SIZE}, {settings.runs} runs")
    return anyio.run(_measure, settings, backend="asyncio")
