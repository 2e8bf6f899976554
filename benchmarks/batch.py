"""W7 batches on Dask: `run_batch` on a 2-worker local cluster against runs one after another.

Two formations, each in its own file so workers import them by path (`run_batch` takes a
`.py` locator): `batch_model_bound.py` (two suggestors each waiting 50 ms per call, 3 steps:
a run is about 150 ms of waiting) and `batch_cpu_bound.py` (one suggestor doing about 30 ms
of pure-Python work). Every run saves to a store with `durability="cycle"`, in the batch and
in the baseline alike.

- Sequential baseline: runs one after another in this process, each on a fresh engine of the
  formation with a SQLite store (and PostgreSQL when `DATABASE_URL` is set), timed one by
  one. It is measured on a sample (40 runs; 20 with `--quick`) and reported as throughput,
  which is what the batch is compared with: the runs are alike, so the sample's mean run
  time stands for all of them.
- Batch: `run_batch_sync` of 1,000 model-bound runs (200 with `--quick`) with
  `runs_per_worker=256`, and of 500 CPU-bound runs (100 with `--quick`) with
  `runs_per_worker=1` (default shards), on
  `LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`,
  into a fresh SQLite file (and PostgreSQL). Each batch is timed once, whole: submitting,
  the workers' runs, collecting the results. Before it, an untimed batch of 4 runs warms
  the workers (their imports of `converge` and the formation) as the baseline's process is.
- Cluster start (the `LocalCluster` and its `Client`) is timed separately and is not part
  of any throughput.
- Command: the model-bound and CPU-bound batches again through `converge batch --json`, timed
  from start to exit, on the warm cluster (`--scheduler`) and with `--workers 2` (the command
  starts its own cluster).
- Before each batch, `parallel_ceiling_before`: how much faster 2 processes run the CPU-bound
  loop than one, right then (other processes on the 2 cores lower it below 2).
- Overhead of the batch machinery per run: `(batch wall - ideal) / runs`, where `ideal` is
  the sequential work (runs x mean sequential run time) divided by the parallelism (2
  workers x the runs a worker task runs at once). What it holds: Dask's scheduling and
  transfers, each task's import of the formation and opening of the store, the shard's
  look-up of each run id in the store, two processes sharing one store, and (model-bound)
  the engine and store work of hundreds of concurrent runs in one event loop, which the
  ideal treats as overlapping like the waits. `worker_ms_per_run` is the same times the
  2 workers: the worker time each run costs beyond its share of the ideal.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Final, cast, final

import anyio

from converge import Durability, Formation, PostgresRunStore, ProposedFact, RunStore, SqliteRunStore
from converge.dask import LARGEST_SHARE, TASKS_PER_WORKER, BatchResult, run_batch_sync

from . import batch_cpu_bound, batch_model_bound
from ._common import Figures, Settings, median, progress, quartiles, rounded

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["measure"]

WORKERS: Final = 2
TARGETS: Final = {"model_bound": 50.0, "cpu_bound": 1.6}
"""Speedup targets (batch throughput over sequential): met when the speedup is at least this."""
WARMUP_RUNS: Final = 4
_HERE: Final = Path(__file__).resolve().parent


@final
@dataclass(frozen=True, slots=True)
class Case:
    """One formation and how W7 runs it."""

    name: str
    formation: Formation
    locator: str
    inputs: Callable[[int], tuple[ProposedFact, ...]]
    runs: int
    runs_per_worker: int
    facts: int  # facts in each finished run, input included
    durability: Durability = "cycle"
    shard_size: int | None = None
    target: str = ""  # the TARGETS entry it is held to (its name by default)
    command: bool = False  # also through the `converge batch` command


def _cases(settings: Settings) -> list[Case]:
    model = Case(
        name="model_bound",
        formation=batch_model_bound.formation,
        locator=str(_HERE / "batch_model_bound.py"),
        inputs=batch_model_bound.inputs,
        runs=200 if settings.quick else 1_000,
        runs_per_worker=256,
        facts=1 + 2 * batch_model_bound.STEPS,
        command=True,
    )
    cpu = Case(
        name="cpu_bound",
        formation=batch_cpu_bound.formation,
        locator=str(_HERE / "batch_cpu_bound.py"),
        inputs=batch_cpu_bound.inputs,
        runs=100 if settings.quick else 500,
        runs_per_worker=1,
        facts=2,
        command=True,
    )
    return [
        model,
        replace(
            model, name="model_bound_exit", durability="exit", target="model_bound", command=False
        ),
        cpu,
        replace(
            cpu,
            name="cpu_bound_exit",
            durability="exit",
            shard_size=10,
            target="cpu_bound",
            command=False,
        ),
    ]


# -- stores -------------------------------------------------------------------------------------


@final
class Stores:
    """Where runs go: fresh SQLite files in a temporary folder, and PostgreSQL if set."""

    __slots__ = ("_pg_runs", "directory", "dsn")

    def __init__(self, directory: Path, dsn: str | None) -> None:
        self.directory = directory
        self.dsn = dsn
        self._pg_runs: list[str] = []

    def backends(self) -> list[str]:
        """`sqlite`, and `postgres` when `DATABASE_URL` is set."""
        return ["sqlite"] if self.dsn is None else ["sqlite", "postgres"]

    def url(self, backend: str, name: str) -> str:
        """A store URL for `run_batch`: a new SQLite file, or the PostgreSQL DSN."""
        if backend == "postgres" and self.dsn is not None:
            return self.dsn
        return str(self.directory / f"{name}.db")

    def open(self, backend: str, name: str) -> RunStore:
        """A store object for the sequential runs."""
        if backend == "postgres" and self.dsn is not None:
            return PostgresRunStore(self.dsn)
        return SqliteRunStore(self.url(backend, name))

    def forget(self, backend: str, run_ids: list[str]) -> None:
        """Delete these runs from PostgreSQL when the workload ends."""
        if backend == "postgres":
            self._pg_runs.extend(run_ids)

    def close(self) -> None:
        """Delete the workload's runs from PostgreSQL."""
        if self.dsn is None or not self._pg_runs:
            return
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            runs = (self._pg_runs,)
            connection.execute("DELETE FROM converge_journal WHERE run_id = ANY(%s)", runs)
            connection.execute("DELETE FROM converge_runs WHERE run_id = ANY(%s)", runs)


def _close(store: RunStore) -> None:
    close = getattr(store, "close", None)
    if callable(close):
        close()


# -- sequential ---------------------------------------------------------------------------------


def _sequential(case: Case, store: RunStore, runs: int, prefix: str) -> list[float]:
    """Seconds of each of `runs` runs, one after another, each on a fresh engine."""

    async def main() -> list[float]:
        times: list[float] = []
        for index in range(runs + 1):  # the first is an untimed warm-up
            started = perf_counter()
            engine = case.formation.engine(
                store=store, durability=case.durability, formation=case.locator
            )
            result = await engine.run(inputs=case.inputs(index), run_id=f"{prefix}-{index}")
            elapsed = perf_counter() - started
            if result.stop_reason.value != "converged" or len(result.context) != case.facts:
                raise RuntimeError(
                    f"W7 {case.name}: run stopped with {result.stop_reason.value} and "
                    f"{len(result.context)} facts, expected converged with {case.facts}"
                )
            if index:
                times.append(elapsed)
        return times

    return anyio.run(main, backend="asyncio")


# -- batch --------------------------------------------------------------------------------------


def _check(case: Case, result: BatchResult, runs: int) -> None:
    counts = result.counts()
    if not result.ok or counts != {"converged": runs}:
        failure = result.failures[0].error if result.failures else ""
        raise RuntimeError(
            f"W7 {case.name}: batch ended with {counts} and {len(result.failures)} failures "
            f"{failure}".rstrip()
        )


def _batch(case: Case, client: Client, url: str, runs: int, batch_id: str) -> float:
    """Seconds of one `run_batch_sync` of `runs` runs, checked."""
    inputs = [case.inputs(index) for index in range(runs)]
    started = perf_counter()
    result = run_batch_sync(
        case.locator,
        inputs,
        client,
        url,
        batch_id=batch_id,
        runs_per_worker=case.runs_per_worker,
        shard_size=case.shard_size,
        durability=case.durability,
    )
    elapsed = perf_counter() - started
    _check(case, result, runs)
    return elapsed


_ROOT: Final = _HERE.parent


def _command(case: Case, url: str, runs: int, batch_id: str, where: list[str]) -> float:
    """Seconds of one `converge batch` command of `runs` runs, whole (start to exit), checked.

    `where` is `["--scheduler", ADDRESS]` (the warm cluster) or `["--workers", "2"]` (the
    command starts its own local cluster, and that start is in the time).
    """
    with tempfile.TemporaryDirectory(prefix="converge-w7-cli-") as folder:
        lines = Path(folder) / "inputs.jsonl"
        with lines.open("w", encoding="utf-8") as out:
            for index in range(runs):
                facts = [json.loads(fact.model_dump_json()) for fact in case.inputs(index)]
                out.write(json.dumps({"inputs": facts}) + "\n")
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": str(_ROOT) + (os.pathsep + path if path else "")}
        command = [
            sys.executable, "-m", "converge.cli", "--store", url, "batch", case.locator,
            str(lines), "--batch-id", batch_id, "--runs-per-worker", str(case.runs_per_worker),
            *where, "--json",
        ]  # fmt: skip
        started = perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        elapsed = perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"W7 {case.name}: converge batch exited {done.returncode}: {done.stderr[-500:]}"
        )
    _check(case, BatchResult.model_validate_json(done.stdout), runs)
    return elapsed


def _command_figures(
    case: Case, client: Client, stores: Stores, backend: str, per_run: float
) -> Figures:
    """`converge batch` on the warm cluster (`--scheduler`) and on its own (`--workers 2`)."""
    address = cast("str", client.scheduler.address)  # pyright: ignore[reportOptionalMemberAccess]
    figures: Figures = {}
    for label, where in (("scheduler", ["--scheduler", address]), ("local", ["--workers", "2"])):
        progress(f"W7 {case.name} {backend}: converge batch --{label}, {case.runs} runs")
        batch_id = f"w7-cli-{label}-{case.name}-{uuid.uuid4().hex[:8]}"
        url = stores.url(backend, f"cli-{label}-{case.name}")
        wall = _command(case, url, case.runs, batch_id, where)
        stores.forget(backend, [f"{batch_id}-{index}" for index in range(case.runs)])
        throughput = case.runs / wall
        figures[label] = {
            "command_wall_s": rounded(wall, 3),
            "command_runs_per_s": rounded(throughput),
            "speedup": rounded(throughput * per_run),
        }
    return figures


def _shard_size(case: Case) -> int:
    """Runs per task, as `converge.dask` shards them by default (or `case.shard_size`)."""
    if case.shard_size is not None:
        return case.shard_size
    share = min(LARGEST_SHARE, math.ceil(case.runs / (TASKS_PER_WORKER * WORKERS)))
    return max(1, min(max(case.runs_per_worker, share), math.ceil(case.runs / (2 * WORKERS))))


def _concurrency(case: Case) -> int:
    """Runs one worker task runs at once: its runs, at most `runs_per_worker`."""
    return min(case.runs_per_worker, _shard_size(case))


def _case_figures(case: Case, client: Client, stores: Stores, backend: str, sample: int) -> Figures:
    tag = uuid.uuid4().hex[:8]
    store = stores.open(backend, f"seq-{case.name}")
    prefix = f"w7-seq-{case.name}-{tag}"
    try:
        progress(f"W7 {case.name} {backend}: sequential, {sample} runs")
        times = _sequential(case, store, sample, prefix)
    finally:
        _close(store)
    stores.forget(backend, [f"{prefix}-{index}" for index in range(sample + 1)])
    per_run = sum(times) / len(times)

    warm_id = f"w7-warm-{case.name}-{tag}"
    _batch(case, client, stores.url(backend, f"warm-{case.name}"), WARMUP_RUNS, warm_id)
    stores.forget(backend, [f"{warm_id}-{index}" for index in range(WARMUP_RUNS)])
    ceiling = _parallel_ceiling(10)  # what 2 processes get of the 2 cores, right now
    progress(f"W7 {case.name} {backend}: batch of {case.runs} runs")
    batch_id = f"w7-{case.name}-{tag}"
    wall = _batch(case, client, stores.url(backend, f"batch-{case.name}"), case.runs, batch_id)
    stores.forget(backend, [f"{batch_id}-{index}" for index in range(case.runs)])

    concurrency = _concurrency(case)
    parallelism = WORKERS * concurrency
    ideal = case.runs * per_run / parallelism
    sequential_throughput = 1 / per_run
    batch_throughput = case.runs / wall
    overhead = (wall - ideal) / case.runs
    found: Figures = {
        "sequential_sample_runs": len(times),
        "sequential_ms_per_run": rounded(per_run * 1000),
        "sequential_ms_per_run_median": rounded(median(times) * 1000),
        "sequential_ms_per_run_quartiles": quartiles(times, 1000),
        "sequential_runs_per_s": rounded(sequential_throughput),
        "batch_runs": case.runs,
        "batch_wall_s": rounded(wall, 3),
        "batch_runs_per_s": rounded(batch_throughput),
        "speedup": rounded(batch_throughput / sequential_throughput),
        "parallel_ceiling_before": rounded(ceiling),
        "shards": math.ceil(case.runs / _shard_size(case)),
        "durability": case.durability,
        "runs_at_once_per_worker": concurrency,
        "ideal_wall_s": rounded(ideal, 3),
        "overhead_ms_per_run": rounded(overhead * 1000, 3),
        "overhead_worker_ms_per_run": rounded(overhead * WORKERS * 1000, 3),
    }
    if case.command:
        found["command"] = _command_figures(case, client, stores, backend, per_run)
    return found


def _crunches(count: int) -> float:
    """Seconds of `count` CPU-bound runs' loops, one after another (in a pool process)."""
    started = perf_counter()
    for seed in range(count):
        batch_cpu_bound.crunch(seed)
    return perf_counter() - started


def _parallel_ceiling(count: int) -> float:
    """How much faster 2 processes run the CPU-bound loop than one, on this machine now.

    The bound of any CPU-bound speedup with 2 workers: below 2 when other processes (or the
    scheduler and the client) take a share of the 2 cores.
    """
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(WORKERS) as pool:
        list(pool.map(_crunches, [1] * WORKERS))  # the processes started and warm
        alone = pool.submit(_crunches, count).result()
        started = perf_counter()
        list(pool.map(_crunches, [count] * WORKERS))
        together = perf_counter() - started
    return (WORKERS * count / together) / (count / alone)


def _start_cluster() -> tuple[Client, Callable[[], None], float]:
    from distributed import Client, LocalCluster

    started = perf_counter()
    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=cast("str", None),  # no dashboard (its stubs say str)
    )
    client = Client(cluster)
    elapsed = perf_counter() - started

    def stop() -> None:
        client.close()  # pyright: ignore[reportUnknownMemberType]
        cluster.close()

    return client, stop, elapsed


def measure(settings: Settings) -> Figures:
    """Run W7: the sequential baselines, then each batch, for SQLite (and PostgreSQL)."""
    cases = _cases(settings)
    sample = 20 if settings.quick else 40
    dsn = os.environ.get("DATABASE_URL")
    progress("W7 batch: starting a 2-worker local cluster")
    client, stop, start_s = _start_cluster()
    figures: Figures = {
        "workers": WORKERS,
        "threads_per_worker": 1,
        "cluster_start_s": rounded(start_s, 3),
        "model_wait_ms_per_call": rounded(batch_model_bound.MODEL_WAIT * 1000),
        "model_steps": batch_model_bound.STEPS,
        "cpu_iterations": batch_cpu_bound.ITERATIONS,
        "runs_per_worker": {case.name: case.runs_per_worker for case in cases},
        "postgres": "measured" if dsn else "skipped: no DATABASE_URL",
    }
    targets: Figures = {}
    figures["targets"] = targets
    with tempfile.TemporaryDirectory(prefix="converge-w7-") as folder:
        stores = Stores(Path(folder), dsn)
        try:
            for backend in stores.backends():
                for case in cases:
                    measured = _case_figures(case, client, stores, backend, sample)
                    figures[f"{backend}_{case.name}"] = measured
                    speedup = measured["speedup"]
                    figures[f"{backend}_{case.name}_speedup"] = speedup
                    goal = TARGETS[case.target or case.name]
                    targets[f"{backend}_{case.name}_speedup"] = {
                        "value": speedup,
                        "at_least": goal,
                        "met": isinstance(speedup, float) and speedup >= goal,
                    }
                    command = measured.get("command")
                    if isinstance(command, dict):
                        for label, numbers in cast("dict[str, Figures]", command).items():
                            value = numbers["speedup"]
                            targets[f"{backend}_{case.name}_command_{label}_speedup"] = {
                                "value": value,
                                "at_least": goal,
                                "met": isinstance(value, float) and value >= goal,
                            }
        finally:
            stop()
            stores.close()
    return figures
