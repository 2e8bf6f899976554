"""Batches of whole runs: the result, and one shard of runs as a worker executes it.

A batch is many runs of one formation, one per input set. `converge.dask` shards them over a
Dask cluster; each shard is a plain function call (`run_shard`) that imports the formation,
opens the store by URL and runs its runs concurrently in one event loop. Run ids are
`"{batch_id}-{index}"`, so a retried shard finds its runs in the store: a stopped run is kept
as it is, an interrupted one is continued, a missing one is started. Nothing that holds a
connection or a client crosses a process boundary.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Final, final

import anyio
from pydantic import TypeAdapter

from ._cli_support import load_formation
from ._durable import Durability
from ._engine import Engine
from ._exceptions import RunNotFoundError, StaleRecordError
from ._formation import Formation, command_timeout
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._stop import RunStatus
from ._store import RunRecord, RunStore

__all__ = [
    "BatchFailure",
    "BatchResult",
    "ShardItem",
    "ShardSpec",
    "StoredRun",
    "open_store_url",
    "run_id_of",
    "run_shard",
]

_INPUTS: Final = TypeAdapter(tuple[ProposedFact, ...])

LEASE_GRACE: Final = 5.0
"""Seconds a shard waits beyond a running run's lease before giving up on it."""


def run_id_of(batch_id: str, index: int) -> str:
    """The run id of input `index` of batch `batch_id`."""
    return f"{batch_id}-{index}"


@final
class BatchFailure(FrozenModel, frozen=True):
    """An input that did not end as a stored run, and why."""

    index: int
    """The input's position."""
    run_id: str
    """The run id it would have had."""
    error: str
    """`"ExceptionType: message"`."""


@final
class StoredRun(FrozenModel, frozen=True):
    """How one input of a batch ended: its stored run."""

    index: int
    """The input's position."""
    run_id: str
    """Its run id."""
    status: RunStatus
    """Its stored status."""
    stop_reason: str | None
    """Its stop reason (`None` unless finished or paused)."""
    merkle_root: str
    """Its context's Merkle root."""
    action: str
    """What this batch did with it: `"started"`, `"continued"` or `"kept"` (already stopped)."""


@final
class BatchResult(FrozenModel, frozen=True):
    """A batch's outcome: a run id per input, counts, and the inputs that failed."""

    batch_id: str
    """The batch."""
    runs: tuple[StoredRun, ...]
    """Each stored run, in input order."""
    failures: tuple[BatchFailure, ...] = ()
    """Inputs that did not end as a stored run."""

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The run id of each stored input, in input order."""
        return tuple(run.run_id for run in self.runs)

    @property
    def ok(self) -> bool:
        """Whether every input ended as a stored run (whatever its stop reason)."""
        return not self.failures

    def counts(self) -> dict[str, int]:
        """How many stored runs ended with each stop reason (or status, when not stopped)."""
        found: dict[str, int] = {}
        for run in self.runs:
            label = run.stop_reason or run.status.value
            found[label] = found.get(label, 0) + 1
        return dict(sorted(found.items()))


@final
@dataclass(frozen=True, slots=True)
class ShardItem:
    """One input of a shard: its index and its facts as `ProposedFact` JSON."""

    index: int
    inputs: str

    @classmethod
    def of(cls, index: int, facts: tuple[ProposedFact, ...]) -> ShardItem:
        """The item of input `index`, its facts written as JSON (read back by `run_shard`)."""
        return cls(index, _INPUTS.dump_json(facts).decode())


def open_store_url(url: str) -> RunStore:
    """The store a URL names: `postgresql://...` or a SQLite file path."""
    from .stores import PostgresRunStore, SqliteRunStore

    if url.startswith(("postgresql://", "postgres://")):
        return PostgresRunStore(url)
    return SqliteRunStore(url)


@final
@dataclass(frozen=True, slots=True)
class ShardSpec:
    """What every shard of a batch shares: the formation, the store, the run settings."""

    locator: str
    store_url: str
    batch_id: str
    runs_per_worker: int
    lease: float
    durability: Durability = "cycle"


_FORMATIONS: dict[str, Formation] = {}
_STORES: dict[str, RunStore] = {}
_CACHE_LOCK = threading.Lock()


def _cached(spec: ShardSpec) -> tuple[Formation, RunStore]:
    """The formation and store of `spec`, loaded and opened once per worker process."""
    with _CACHE_LOCK:
        formation = _FORMATIONS.get(spec.locator)
        if formation is None:
            formation = _FORMATIONS[spec.locator] = load_formation(spec.locator)
        store = _STORES.get(spec.store_url)
        if store is None:
            store = _STORES[spec.store_url] = open_store_url(spec.store_url)
        return formation, store


def run_shard(spec: ShardSpec, items: Sequence[ShardItem]) -> list[StoredRun | BatchFailure]:
    """Run (or find, or continue) each item's run, `runs_per_worker` at a time; in a worker.

    The formation is imported and the store opened once per worker process, and reused by
    every shard that process runs.

    Raises:
        converge._cli_support.CliError: The formation cannot be imported.
    """
    formation, store = _cached(spec)
    limiter = anyio.CapacityLimiter(spec.runs_per_worker)
    done: list[StoredRun | BatchFailure] = []

    async def one(item: ShardItem) -> None:
        async with limiter:
            run_id = run_id_of(spec.batch_id, item.index)
            try:
                engine = formation.engine(
                    store=store,
                    formation=spec.locator,
                    lease=spec.lease,
                    durability=spec.durability,
                    suggestor_timeout=command_timeout(formation),
                )
                inputs = _inputs(item.inputs)
                done.append(await _ensure(engine, store, run_id, item.index, inputs, spec.lease))
            except Exception as error:
                text = f"{type(error).__name__}: {error}"
                done.append(BatchFailure(index=item.index, run_id=run_id, error=text))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(one, item)

    anyio.run(main)
    return sorted(done, key=lambda entry: entry.index)


def _inputs(text: str) -> tuple[ProposedFact, ...]:
    return _INPUTS.validate_json(text)


async def _ensure(
    engine: Engine,
    store: RunStore,
    run_id: str,
    index: int,
    inputs: tuple[ProposedFact, ...],
    lease: float,
) -> StoredRun:
    """The stored run of `run_id`: kept if stopped, continued if interrupted, else started."""
    deadline = monotonic() + lease + LEASE_GRACE
    while True:
        try:
            record = await store.load(run_id)
        except RunNotFoundError:
            try:
                await engine.run(inputs=inputs, run_id=run_id)
            except StaleRecordError:
                continue  # another attempt created it meanwhile: look again
            return await _stored(store, run_id, index, "started")
        if record.status in (RunStatus.FINISHED, RunStatus.PAUSED):
            return _as_stored(record, index, "kept")
        if record.status is RunStatus.INTERRUPTED:
            try:
                await engine.resume_run(run_id)
            except StaleRecordError:
                continue
            return await _stored(store, run_id, index, "continued")
        if monotonic() > deadline:  # still running elsewhere, its lease renewed
            raise RuntimeError(f"run {run_id} is still running elsewhere; not taken over")
        await anyio.sleep(min(1.0, lease / 3))


async def _stored(store: RunStore, run_id: str, index: int, action: str) -> StoredRun:
    return _as_stored(await store.load(run_id), index, action)


def _as_stored(record: RunRecord, index: int, action: str) -> StoredRun:
    stop = record.stop_reason
    return StoredRun(
        index=index,
        run_id=record.run_id,
        status=record.status,
        stop_reason=None if stop is None else stop.value,
        merkle_root=record.integrity.merkle_root,
        action=action,
    )
