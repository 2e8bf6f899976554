"""Batches of runs on a Dask cluster (extra `dask`): `run_batch` and `run_batch_sync`.

A run is the unit of work and shards are whole runs: each Dask task runs up to
`runs_per_worker` runs of the formation concurrently in one event loop on a worker, and the
store (PostgreSQL across machines, SQLite on one) is where the results meet. Workers import the
formation themselves from its locator (a module name, or a file path they can read), and open
the store from its URL; nothing holding a connection or a client is pickled. Run ids are
`"{batch_id}-{index}"`: a task that Dask retries (its worker died) finds its runs in the store,
keeps the stopped ones, continues the interrupted ones (once their lease has run out) and
starts the missing ones, so every input ends as exactly one stored run.

`distributed` is imported by the functions here, not by `import converge`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, cast

import anyio
import anyio.to_thread

from ._core._error import UsageError
from ._core._exceptions import ConfigurationError, RunNotFoundError
from ._core._proposal import ProposedFact
from ._core._public import publish as _publish
from ._core._stop import RunStatus
from ._formation import load_formation, locate
from ._kernel._sync import call_sync
from ._scale._batch import (
    BatchFailure,
    BatchResult,
    ShardItem,
    ShardSpec,
    StoredRun,
    changed_run_id,
    open_store_url,
    run_id_of,
    run_shard,
)
from ._scale._batch import as_stored as _as_stored
from ._scale._batch import inputs_of as _inputs_of
from ._scale._batch import same_inputs as _same_inputs
from ._scale._batch import settled as _settled
from ._scale._defaults import DEFAULT_RUNS_PER_WORKER as DEFAULT_RUNS_PER_WORKER
from ._scale._defaults import DEFAULT_WORKER_TIMEOUT as DEFAULT_WORKER_TIMEOUT
from .stores._durable import DEFAULT_LEASE, Durability

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["BatchFailure", "BatchResult", "StoredRun", "run_batch", "run_batch_sync", "run_id_of"]

TASKS_PER_WORKER = 4
"""Tasks a batch gives each worker by default, when its runs are many and short."""
LARGEST_SHARE = 64
"""Runs a default shard holds at most for `TASKS_PER_WORKER`: progress stays fine-grained."""

Progress = Callable[[int, int], None]
"""Called with (runs stored, inputs in all) as shards finish."""


async def run_batch(
    formation: str,
    inputs: Iterable[Sequence[ProposedFact]],
    client: Client,
    store: str,
    *,
    batch_id: str | None = None,
    runs_per_worker: int = DEFAULT_RUNS_PER_WORKER,
    shard_size: int | None = None,
    durability: Durability = "cycle",
    lease: float = DEFAULT_LEASE,
    progress: Progress | None = None,
    rerun_changed: bool = False,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    signing_key: bytes | str | None = None,
) -> BatchResult:
    """Run `formation` once per input set on the cluster of `client`; every input is stored.

    Args:
        formation: A module name or a `.py` path with a module-level `formation`, which every
            worker can import.
        inputs: One sequence of `ProposedFact`s per run.
        client: A `distributed.Client` (synchronous or `asynchronous=True`).
        store: A SQLite file path or a `postgresql://` URL every worker can reach.
        batch_id: Names the batch and its run ids (a new id by default). Running a batch again
            with the same id and inputs keeps what is stored and completes the rest.
        runs_per_worker: Runs a task runs at once, in one event loop (1 for CPU-bound work).
        shard_size: Runs per task (default: `runs_per_worker`, raised to a share that gives
            each worker 4 tasks, up to 64 runs, and at most one that gives it two). Larger
            shards spread the per-task cost (about 3 ms of a worker's time) over more runs.
        durability: The runs' durability (see `Engine`): `"exit"` saves each run once, when
            it stops, for formations cheap enough to restart from their inputs.
        lease: The runs' lease (see `Engine`): how long a dead worker's run counts as running.
        progress: Called with (runs stored, inputs in all) as shards finish: only what the
            store holds counts.
        rerun_changed: Run an input that is not the one its stored run was started from as
            a new run, `changed_run_id` (by default it is refused: a `BatchFailure`).
        worker_timeout: Seconds to wait for the cluster to have a worker before giving up.
        signing_key: Signs every run the batch saves and refuses a stored run that does not
            verify under it (as `Engine(signing_key=...)`). It travels to the workers with
            the tasks: over a cluster's own connections, which should then use TLS.

    Raises:
        ConfigurationError: `runs_per_worker` is not positive, an input is not a sequence of
            `ProposedFact`, or the formation cannot be imported (here, before any task runs).
        TimeoutError: No worker joined the cluster within `worker_timeout` seconds.
    """
    _check_sizes(runs_per_worker, shard_size)
    locator = _loaded(formation)
    items = _items(inputs)
    batch = batch_id or uuid.uuid4().hex[:12]
    workers = await _wait_for_workers(client, worker_timeout)
    shards = _shards(items, shard_size or runs_per_worker, workers, fixed=shard_size is not None)
    spec = ShardSpec(locator, store, batch, runs_per_worker, lease, durability)
    key = signing_key.encode() if isinstance(signing_key, str) else signing_key
    spec = replace(
        spec, rerun_changed=rerun_changed, max_losses=_allowed_failures(), signing_key=key
    )
    return _batch_result(batch, await _submit(client, spec, shards, progress))


def run_batch_sync(
    formation: str,
    inputs: Iterable[Sequence[ProposedFact]],
    client: Client,
    store: str,
    *,
    batch_id: str | None = None,
    runs_per_worker: int = DEFAULT_RUNS_PER_WORKER,
    shard_size: int | None = None,
    durability: Durability = "cycle",
    lease: float = DEFAULT_LEASE,
    progress: Progress | None = None,
    rerun_changed: bool = False,
    worker_timeout: float = DEFAULT_WORKER_TIMEOUT,
    signing_key: bytes | str | None = None,
) -> BatchResult:
    """`run_batch` for scripts, with a synchronous `Client` (not inside a running loop)."""
    return call_sync(
        "asyncio",
        run_batch,
        formation,
        list(inputs),
        client,
        store,
        batch_id=batch_id,
        runs_per_worker=runs_per_worker,
        shard_size=shard_size,
        durability=durability,
        lease=lease,
        progress=progress,
        rerun_changed=rerun_changed,
        worker_timeout=worker_timeout,
        signing_key=signing_key,
    )


def _check_sizes(runs_per_worker: int, shard_size: int | None) -> None:
    """Refuse a batch whose runs per worker, or runs per shard, are not positive."""
    if runs_per_worker < 1:
        raise ConfigurationError(f"runs_per_worker must be at least 1, got {runs_per_worker}")
    if shard_size is not None and shard_size < 1:
        raise ConfigurationError(f"shard_size must be at least 1, got {shard_size}")


def _batch_result(batch: str, outcomes: Sequence[StoredRun | BatchFailure]) -> BatchResult:
    """The batch's stored runs and failures, each in input order."""
    runs = sorted((o for o in outcomes if isinstance(o, StoredRun)), key=lambda r: r.index)
    failures = sorted((o for o in outcomes if isinstance(o, BatchFailure)), key=lambda f: f.index)
    return BatchResult(batch_id=batch, runs=tuple(runs), failures=tuple(failures))


def _loaded(formation: str) -> str:
    """The formation's locator, once it imports here: one error, not one per input.

    Raises:
        ConfigurationError: It cannot be found, or its module raised while imported.
    """
    locator = locate(formation)
    try:
        load_formation(locator)
    except UsageError as error:
        hint = f" ({error.hint})" if error.hint else ""
        raise ConfigurationError(f"formation {formation!r}: {error}{hint}") from None
    except Exception as error:  # the formation's module raised while it was imported
        raise ConfigurationError(
            f"formation {formation!r} failed to load: {type(error).__name__}: {error}"
        ) from error
    return locator


def _items(inputs: Iterable[Sequence[ProposedFact]]) -> list[ShardItem]:
    items: list[ShardItem] = []
    for index, facts in enumerate(inputs):
        given = tuple(facts)
        for position, fact in enumerate(given):
            if not isinstance(fact, ProposedFact):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(
                    f"inputs[{index}][{position}] must be a ProposedFact, got {type(fact).__name__}"
                )
        items.append(ShardItem.of(index, given))
    return items


def _workers(client: Client) -> int:
    info = cast("dict[str, object]", client.scheduler_info())
    workers = info.get("workers")
    return len(cast("dict[str, object]", workers)) if isinstance(workers, dict) else 0


async def _wait_for_workers(client: Client, seconds: float) -> int:
    """The cluster's workers, once it has one.

    Raises:
        TimeoutError: None joined within `seconds`.
    """
    found = _workers(client)
    if found:
        return found
    wait = cast("Callable[..., object]", client.wait_for_workers)
    try:
        if client.asynchronous:
            await cast("Awaitable[object]", wait(1, timeout=seconds))
        else:
            await anyio.to_thread.run_sync(lambda: wait(1, timeout=seconds))
    except TimeoutError:
        address = str(getattr(client.scheduler, "address", None) or "?")
        raise TimeoutError(
            f"scheduler {address} has no workers: none joined within {seconds:g} s"
        ) from None
    return max(1, _workers(client))


def _allowed_failures() -> int:
    """Times a task's worker may die before Dask gives up on it: a run may be lost as often."""
    import dask.config

    allowed: object = dask.config.get("distributed.scheduler.allowed-failures", 3)  # pyright: ignore[reportUnknownMemberType]
    return max(1, int(cast("int", allowed)))


class _Future(Protocol):
    """What this module uses of a `distributed.Future`."""

    @property
    def key(self) -> object: ...

    def result(self) -> object: ...


def _shards(
    items: list[ShardItem], size: int, workers: int, *, fixed: bool
) -> list[list[ShardItem]]:
    """Whole runs in shards of `size`, or by default of a share of the runs.

    When not `fixed`, a shard holds at least a share that gives each worker
    `TASKS_PER_WORKER` tasks (up to `LARGEST_SHARE` runs), and at most one that gives each
    worker two.
    """
    if not items:
        return []
    if not fixed:
        share = min(LARGEST_SHARE, math.ceil(len(items) / (TASKS_PER_WORKER * workers)))
        size = max(1, min(max(size, share), math.ceil(len(items) / (2 * workers))))
    return [items[start : start + size] for start in range(0, len(items), size)]


async def _submit(
    client: Client, spec: ShardSpec, shards: list[list[ShardItem]], progress: Progress | None
) -> list[StoredRun | BatchFailure]:
    from distributed import as_completed

    submit = cast("Callable[..., _Future]", client.submit)  # pyright: ignore[reportUnknownMemberType]
    futures = [submit(run_shard, spec, shard, pure=False, retries=3) for shard in shards]
    shard_of = {future.key: shard for future, shard in zip(futures, shards, strict=True)}
    total = sum(len(shard) for shard in shards)
    outcomes: list[StoredRun | BatchFailure] = []
    lost: list[tuple[list[ShardItem], BaseException]] = []

    def show() -> None:
        if progress is not None:
            progress(sum(1 for o in outcomes if isinstance(o, StoredRun)), total)

    def take(future: _Future, result: object, error: BaseException | None) -> None:
        if error is None:
            outcomes.extend(cast("list[StoredRun | BatchFailure]", result))
        else:
            lost.append((shard_of[future.key], error))
        show()

    if client.asynchronous:
        async for done in cast("AsyncIterator[_Future]", as_completed(futures)):
            try:
                result = await cast("Awaitable[object]", done)
            except Exception as error:
                take(done, None, error)
            else:
                take(done, result, None)
    else:

        def collect() -> None:
            for done in cast("Iterator[_Future]", as_completed(futures)):
                try:
                    result = done.result()
                except Exception as error:
                    take(done, None, error)
                else:
                    take(done, result, None)

        await anyio.to_thread.run_sync(collect)
    if lost:
        outcomes.extend(await _recovered(spec, lost))
        show()
    return outcomes


async def _recovered(
    spec: ShardSpec, lost: list[tuple[list[ShardItem], BaseException]]
) -> list[StoredRun | BatchFailure]:
    """What the store holds of the inputs of tasks that failed (their workers kept dying).

    A run stored as stopped by an earlier attempt is a `StoredRun` (`"found"`); any other is
    a `BatchFailure` saying why and where it stands, once no process runs it any more (its
    lease ran out), so that it is never left `running`.
    """
    store = open_store_url(spec.store_url)
    found: list[StoredRun | BatchFailure] = []

    async def one(item: ShardItem, error: BaseException) -> None:
        run_id = run_id_of(spec.batch_id, item.index)
        reason = f"{type(error).__name__}: {error}"
        try:
            record = await store.load(run_id)
            if spec.rerun_changed and not _same_inputs(record, item):
                run_id = changed_run_id(spec.batch_id, item.index, _inputs_of(item))
                record = await store.load(run_id)
            record = await _settled(store, record, spec.lease)
        except RunNotFoundError:
            found.append(BatchFailure(index=item.index, run_id=run_id, error=reason))
            return
        except Exception as error:
            text = f"{reason}; {type(error).__name__}: {error}"
            found.append(BatchFailure(index=item.index, run_id=run_id, error=text))
            return
        if record.status in (RunStatus.FINISHED, RunStatus.PAUSED):
            found.append(_as_stored(record, item.index, "found"))
            return
        where = f"run {run_id} is {record.status.value} after cycle {record.cycles}"
        found.append(BatchFailure(index=item.index, run_id=run_id, error=f"{reason}; {where}"))

    try:
        async with anyio.create_task_group() as group:
            for shard, error in lost:
                for item in shard:
                    group.start_soon(one, item, error)
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    return found


_publish(__name__, globals(), __all__)
