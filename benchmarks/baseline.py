"""W1 to W4 against an earlier commit of converge, the two engines alternated in one process.

    python -m benchmarks.baseline REF [--rounds N] [--only W1,W2,W3,W4] [--project]
                                      [--read-proof]

On a shared machine one invocation of the suite can run up to three times slower than the
next, so two invocations, one per commit, compare the hours as much as the commits. This
tool loads `converge/` as it was at `REF` (`git archive`) as a second package,
`converge_baseline`, beside the working tree's, and builds each workload twice from the
suite's own module (`chain`, `fanout`, `growth`, `wide_idle`): once as it is, once with its
`from converge import ...` bound to the earlier package. The same suggestors, inputs and
checks, each built from its own package's classes. Then it times one run of each in turn,
the order alternating, `rounds` times, each after `prepare()` as the suite's runs are, and
reports each engine's median and the quartiles of the per-round ratio current / baseline,
which machine noise hits alike.

The figures are whole runs, divided as the suite divides them: per cycle (W1, W4), per
promoted fact (W3), the wall time (W2, with the anyio floor timed in the same round, and
each engine's time over it). W1's engine share needs the replay, which reads private parts
of the context that an earlier commit may not have: the current engine's share (its run
less the replay of its user code, timed after it) stands beside the baseline's whole cycle,
so its ratio is the current engine's share as a part of the baseline's cycle. Each result
is checked as the suite checks it; `same_root` says whether the two engines sealed the
same Merkle root (false when the seal's format changed in between, true for the same work).

A run's integrity proof is built on the first read of `result.integrity`, after the run,
as its trace is; an engine before that change built it in the run. `--read-proof` times
each run with that first read, so both engines' figures include the Merkle tree.

With `--project` (and `REF` the goals' starting commit, `4387133`), the report also holds
the performance goals projected onto the project's machine, where they were set: each ratio
times that machine's figure for the commit (`projection.py`).

The earlier package must import itself only relatively (`from ._x import ...`), as
converge's modules do: an absolute `import converge` inside it would load the working
tree's package instead, so such a package is refused.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from time import perf_counter
from types import ModuleType
from typing import Final, final

import anyio

import converge

from . import chain, fanout, growth, wide_idle
from ._common import Figures, machine, prepare, progress, rounded
from .projection import ISSUE_START, W1_ENGINE, W1_TOTAL, project

__all__ = ["compare", "extract", "load_package", "main", "rebind"]

PACKAGE: Final = "converge_baseline"
_REPOSITORY: Final = Path(__file__).resolve().parent.parent
_ABSOLUTE: Final = re.compile(r"^[ \t]*(?:from|import)[ \t]+converge(?:[.\s]|$)", re.MULTILINE)
_REBOUND: Final = f"{__package__}._baseline_"
_MODULES: Final = {"W1": chain, "W2": fanout, "W3": growth, "W4": wide_idle}

Once = Callable[[], Awaitable[tuple[float, str]]]
"""One timed run: its figure and the Merkle root it sealed."""


def extract(ref: str, into: Path) -> Path:
    """Write `converge/` as it was at `ref` under `into`; return that folder.

    Raises:
        ValueError: git cannot read `ref` (the message is git's).
    """
    done = subprocess.run(
        ["git", "-C", str(_REPOSITORY), "archive", "--format=tar", ref, "converge"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip()
        raise ValueError(f"cannot read converge/ at {ref!r} from {_REPOSITORY}: {reason}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into / "converge"


def _commit(ref: str) -> str:
    """`ref`'s abbreviated commit hash (`extract` has read it, so git knows it)."""
    done = subprocess.run(
        ["git", "-C", str(_REPOSITORY), "rev-parse", "--short", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def load_package(root: Path, name: str = PACKAGE) -> ModuleType:
    """Import the package in `root` as `name`, beside the working tree's `converge`.

    Raises:
        ValueError: A module of the package imports `converge` absolutely (named with its
            line), which would load the working tree's package inside the earlier one; or
            it imports a module this environment lacks (a dependency the earlier commit
            had, such as `immutables` at 4387133), named with the command that installs it.
    """
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found = _ABSOLUTE.search(text)
        if found is not None:
            line = text.count("\n", 0, found.start()) + 1
            raise ValueError(
                f"{path}:{line} imports converge absolutely ({found.group().strip()!r}); "
                "only a package that imports itself relatively can be loaded beside it"
            )
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    if spec is None or spec.loader is None:
        raise ValueError(f"{root} is not a package")
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
    except ModuleNotFoundError as error:
        del sys.modules[name]
        if error.name is None or error.name.partition(".")[0] == name:
            raise
        missing = error.name.partition(".")[0]
        raise ValueError(
            f"the package in {root} imports {missing!r}, which this environment lacks "
            f"(a dependency of that commit): install it with "
            f"`{sys.executable} -m pip install {missing}` and run again"
        ) from error
    except BaseException:
        del sys.modules[name]
        raise
    return package


def rebind(module: ModuleType, package: ModuleType) -> ModuleType:
    """A second copy of the suite's `module`, its `converge` names taken from `package`.

    Its relative imports (`._common`, `.floor`) are the suite's own modules, already
    imported; only what it imports from `converge` changes.

    Raises:
        ImportError: `package` lacks a name the module imports (an earlier API).
    """
    if module.__file__ is None:
        raise ValueError(f"{module.__name__} has no source file")
    name = f"{_REBOUND}{module.__name__.rpartition('.')[2]}"
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {module.__file__}")
    copy = importlib.util.module_from_spec(spec)
    sys.modules[name] = copy  # a dataclass looks its module up while it is made
    current = sys.modules["converge"]
    sys.modules["converge"] = package
    try:
        spec.loader.exec_module(copy)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.modules["converge"] = current
    return copy


def _per_cycle(seconds: float, cycles: int) -> float:
    return seconds * 1e6 / cycles


def _wall_ms(seconds: float, cycles: int) -> float:
    return seconds * 1e3


def _per_fact(seconds: float, cycles: int) -> float:
    return seconds * 1e6 / growth.TOTAL


def _runs(workload: str, module: ModuleType, read_proof: bool) -> dict[str, Once]:
    """The timed runs of `workload` built from `module` (the suite's, or a rebound copy)."""
    timed = partial(_timed, read_proof=read_proof)
    if workload == "W1":
        engine, _ = module.build_engine()
        return {W1_TOTAL: timed(engine, [module.START], module.check, _per_cycle)}
    if workload == "W2":
        return {"wall ms": timed(module.build_engine(), [], module.check, _wall_ms)}
    if workload == "W3":
        engine, _ = module.build_engine()
        return {"µs / fact": timed(engine, [], module.check, _per_fact)}
    return {
        f"µs / cycle, {size} registered": timed(
            module.build_engine(size), [module.START], module.check, _per_cycle
        )
        for size in (1, 1000)
    }


def _timed(
    engine: converge.Engine,
    inputs: Sequence[converge.ProposedFact],
    check: Callable[[converge.ConvergeResult], int],
    figure: Callable[[float, int], float],
    *,
    read_proof: bool,
) -> Once:
    """One run of `engine` from a clean heap: `figure(seconds, cycles)` and its root.

    `check` raises if the run did not run as designed, and counts its cycles. With
    `read_proof`, the time includes the first read of the result's integrity proof (built
    then since `ConvergeResult.integrity` became lazy; an earlier engine built it in the run).
    """

    async def once() -> tuple[float, str]:
        prepare()
        started = perf_counter()
        result = await engine.run(inputs=inputs)
        if read_proof:
            _ = result.integrity  # built on this first read
        seconds = perf_counter() - started
        return figure(seconds, check(result)), result.integrity.merkle_root

    return once


def _engine_share(run: Once, user: Callable[[], Awaitable[float]]) -> Once:
    """`run` (W1's µs per cycle) less the replay of its user code: the engine's share."""

    async def once() -> tuple[float, str]:
        total, root = await run()
        return total - await user(), root

    return once


@final
@dataclass
class _Series:
    """One figure's timings: the baseline's and the current engine's, round by round."""

    baseline: list[float]
    current: list[float]
    roots: set[tuple[str, str]]

    def figures(self) -> Figures:
        ratios = [now / then for then, now in zip(self.baseline, self.current, strict=True)]
        return {
            "baseline": rounded(statistics.median(self.baseline), 3),
            "current": rounded(statistics.median(self.current), 3),
            "ratio": rounded(statistics.median(ratios), 3),
            "ratio_quartiles": _quartiles(ratios),
            "same_root": all(then == now for then, now in self.roots),
        }


def _quartiles(values: Sequence[float]) -> list[float]:
    if len(values) < 2:
        return [rounded(values[0], 3)] * 2
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return [rounded(first, 3), rounded(third, 3)]


async def _anyio_floor() -> tuple[float, str]:
    prepare()
    started = perf_counter()
    await fanout.anyio_floor()
    return (perf_counter() - started) * 1e3, ""


async def _alternate(
    baseline: dict[str, Once], current: dict[str, Once], rounds: int
) -> dict[str, _Series]:
    """Each figure's runs, one of each engine per round, the order alternating."""
    series = {name: _Series([], [], set()) for name in current}
    for number in range(rounds + 1):  # round 0 warms both up, untimed
        order = ("baseline", "current") if number % 2 else ("current", "baseline")
        for name in current:
            runs = {"baseline": baseline[name], "current": current[name]}
            timed = {side: await runs[side]() for side in order}
            (then, then_root), (now, now_root) = timed["baseline"], timed["current"]
            if number:
                found = series[name]
                found.baseline.append(then)
                found.current.append(now)
                found.roots.add((then_root, now_root))
    return series


async def _workload(
    workload: str, package: ModuleType, rounds: int, read_proof: bool = False
) -> Figures:
    module = _MODULES[workload]
    try:
        baseline = _runs(workload, rebind(module, package), read_proof)
    except (ImportError, AttributeError, TypeError) as error:
        raise ValueError(
            f"{workload} cannot be built on the earlier converge "
            f"({type(error).__name__}: {error}): it lacks what the workload uses"
        ) from error
    current = _runs(workload, module, read_proof)
    if workload == "W1":  # the current engine's share, beside the baseline's whole cycle
        baseline[W1_ENGINE] = baseline[W1_TOTAL]
        current[W1_ENGINE] = _engine_share(current[W1_TOTAL], await chain.user_timer())
    if workload == "W2":  # the floor, timed in every round beside both engines
        baseline["anyio floor ms"] = current["anyio floor ms"] = _anyio_floor
    series = await _alternate(baseline, current, rounds)
    if workload != "W2":
        return {name: found.figures() for name, found in series.items()}
    floor = series.pop("anyio floor ms")  # timed twice a round: once beside each engine
    walls = series["wall ms"]
    return {
        "wall ms": walls.figures(),
        "anyio floor ms": rounded(statistics.median(floor.baseline + floor.current), 3),
        "over the anyio floor ms": {
            "baseline": rounded(_over(walls.baseline, floor.baseline), 3),
            "current": rounded(_over(walls.current, floor.current), 3),
        },
    }


def _over(walls: Sequence[float], floors: Sequence[float]) -> float:
    return statistics.median([wall - floor for wall, floor in zip(walls, floors, strict=True)])


def compare(
    ref: str, rounds: int, only: Sequence[str] = tuple(_MODULES), *, read_proof: bool = False
) -> Figures:
    """Time `only` on converge at `ref` and on the working tree, `rounds` alternations each.

    With `read_proof`, each timed run includes the first read of its integrity proof.

    Raises:
        ValueError: `ref` cannot be read, its package cannot be loaded beside this one, or a
            workload name is unknown.
    """
    unknown = sorted(set(only) - set(_MODULES))
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; choose from {sorted(_MODULES)}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    with tempfile.TemporaryDirectory(prefix="converge-baseline-") as folder:
        package = load_package(extract(ref, Path(folder)))
        try:
            report: Figures = {"suite": "baseline", "ref": ref, "ref_commit": _commit(ref)}
            report["rounds"] = rounds
            report["proof read"] = read_proof
            report["machine"] = machine()
            for workload in only:
                progress(f"{workload}: {rounds} alternations against {ref}")
                report[workload] = anyio.run(
                    _workload, workload, package, rounds, read_proof, backend="asyncio"
                )
            return report
        finally:
            loaded = [name for name in sys.modules if name.startswith((PACKAGE, _REBOUND))]
            for name in loaded:
                del sys.modules[name]


def _projectable(ref: str) -> None:
    """Raise `ValueError` unless `ref` is the commit the goals are projected from."""
    try:
        commit = _commit(ref)
    except subprocess.CalledProcessError:
        commit = ref
    if not commit.startswith(ISSUE_START):
        raise ValueError(f"--project compares with {ISSUE_START}, not with {ref}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baseline", description=__doc__)
    parser.add_argument("ref", help="the earlier commit (any git revision)")
    parser.add_argument("--rounds", type=int, default=30, help="alternations per figure")
    parser.add_argument("--only", default="W1,W2,W3,W4", help="comma-separated workloads")
    parser.add_argument(
        "--project",
        action="store_true",
        help=f"project the performance goals (REF must be {ISSUE_START})",
    )
    parser.add_argument(
        "--read-proof",
        action="store_true",
        help="time each run with the first read of its integrity proof (built on that read)",
    )
    args = parser.parse_args(argv)
    try:
        if args.project:
            _projectable(args.ref)
        only = tuple(args.only.split(","))
        report = compare(args.ref, args.rounds, only, read_proof=args.read_proof)
        if args.project:
            report["projected"] = project(report)
    except ValueError as error:
        print(f"benchmarks.baseline: {error}", file=sys.stderr)
        return 2
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
