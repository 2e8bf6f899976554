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
from dataclasses import dataclass, field
from hashlib import sha256
from time import monotonic
from typing import Final, final

import anyio
from pydantic import TypeAdapter

from .._core._exceptions import RunNotFoundError, StaleRecordError
from .._core._proposal import ProposedFact
from .._core._record import RunRecord
from .._core._stop import RunStatus
from .._core._store import RunStore
from .._engine import Engine
from .._formation import Formation, command_timeout, load_formation
from ..stores._durable import Durability
from ._grouped import grouped
from ._result import (
    BatchFailure,
    BatchResult,
    StoredRun,
    as_stored,
    first_failure,
    of_result,
)

__all__ = [
    "BatchFailure",
    "BatchResult",
    "InputChangedError",
    "ShardItem",
    "ShardSpec",
    "StoredRun",
    "as_stored",
    "changed_run_id",
    "first_failure",
    "inputs_of",
    "open_store_url",
    "run_id_of",
    "run_shard",
    "same_inputs",
    "settled",
]

_INPUTS: Final = TypeAdapter(tuple[ProposedFact, ...])

LEASE_GRACE: Final = 5.0
"""Seconds a shard waits beyond a running run's lease before giving up on it."""


class InputChangedError(ValueError):
    """An input of a batch is not the one its stored run was started from."""


def run_id_of(batch_id: str, index: int) -> str:
    """The run id of input `index` of batch `batch_id`."""
    return f"{batch_id}-{index}"


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
    from ..stores import PostgresRunStore, SqliteRunStore

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
    rerun_changed: bool = False
    """Run an input that changed since its run was stored as a new run (`changed_run_id`)."""
    max_losses: int = 3
    """Times a run may be lost (its process died) before it is not continued again."""
    signing_key: bytes | None = field(default=None, repr=False)
    """Signs every run the batch saves, and checks every stored run it keeps or continues."""


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
    every shard that process runs. Runs found running elsewhere or lost (their process died)
    wait until the rest of the shard is done; then, once none of them is running any more,
    the lost ones are continued one at a time, the least often lost first. So a run whose
    step kills its process (a poisoned input) dies alone, the others are never lost because
    of it, and once it has been lost `spec.max_losses` times it is not continued again: it
    stays interrupted, and is reported as failed.

    Raises:
        UsageError: The formation cannot be imported.
    """
    formation, cached = _cached(spec)
    shard = _Shard(spec, formation, grouped(cached))  # saves grouped in this shard's loop
    anyio.run(shard.main, items)
    return sorted(shard.done, key=lambda entry: entry.index)


@final
class _Shard:
    """One shard's runs in one event loop: the outcomes, and the runs left for later."""

    __slots__ = ("done", "formation", "later", "limiter", "spec", "store")

    def __init__(self, spec: ShardSpec, formation: Formation, store: RunStore) -> None:
        self.spec = spec
        self.formation = formation
        self.store = store
        self.limiter = anyio.CapacityLimiter(spec.runs_per_worker)
        self.done: list[StoredRun | BatchFailure] = []
        self.later: list[tuple[ShardItem, RunRecord]] = []

    async def main(self, items: Sequence[ShardItem]) -> None:
        """Each item's run; the ones found running or lost last, one at a time."""
        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(self.first, item)
        deferred = {item.index: item for item, _ in self.later}
        order: list[tuple[int, int]] = []
        async with anyio.create_task_group() as group:
            for item, record in self.later:
                group.start_soon(self.settle, item, record, order)
        self.later.clear()
        for _, index in sorted(order):
            await self.ensure(deferred[index], defer=False)

    async def first(self, item: ShardItem) -> None:
        """The item's run, `runs_per_worker` at a time; deferred if running or lost."""
        async with self.limiter:
            await self.ensure(item, defer=True)

    async def settle(self, item: ShardItem, record: RunRecord, into: list[tuple[int, int]]) -> None:
        """Wait until a deferred run no longer runs; note how often it was lost."""
        try:
            record = await settled(self.store, record, self.spec.lease)
        except Exception as error:
            self.done.append(self.failed(item, error))
            return
        into.append((_losses(record), item.index))

    async def ensure(self, item: ShardItem, *, defer: bool) -> None:
        """Keep, continue or start the item's run (see `_ensure`), and note the outcome."""
        spec = self.spec
        try:
            engine = self.formation.engine(
                store=self.store,
                formation=spec.locator,
                lease=spec.lease,
                durability=spec.durability,
                suggestor_timeout=command_timeout(self.formation),
                signing_key=spec.signing_key,
            )
            inputs = _inputs(item.inputs)
            outcome = await _ensure(engine, self.store, spec, item.index, inputs, defer=defer)
        except Exception as error:
            self.done.append(self.failed(item, error))
            return
        if isinstance(outcome, StoredRun):
            self.done.append(outcome)
        else:
            self.later.append((item, outcome))

    def failed(self, item: ShardItem, error: Exception) -> BatchFailure:
        """The failure of `item`, saying why."""
        run_id = run_id_of(self.spec.batch_id, item.index)
        return BatchFailure(
            index=item.index, run_id=run_id, error=f"{type(error).__name__}: {error}"
        )


def _inputs(text: str) -> tuple[ProposedFact, ...]:
    return _INPUTS.validate_json(text)


def inputs_of(item: ShardItem) -> tuple[ProposedFact, ...]:
    """The facts of `item`."""
    return _inputs(item.inputs)


def same_inputs(record: RunRecord, item: ShardItem) -> bool:
    """Whether `record` is the run of `item`'s inputs (as its trace recorded them)."""
    return _INPUTS.dump_json(record.trace.inputs).decode() == item.inputs


def _losses(record: RunRecord) -> int:
    """How often the run's process died under it: its lost continuations, and now if lost."""
    lost = sum(1 for continuation in record.trace.continuations if continuation.cause == "lost")
    return lost + (record.interruption == "lost")


def changed_run_id(batch_id: str, index: int, inputs: tuple[ProposedFact, ...]) -> str:
    """The run id of input `index` when it changed since `run_id_of` was stored."""
    digest = sha256(_INPUTS.dump_json(inputs)).hexdigest()[:12]
    return f"{run_id_of(batch_id, index)}-{digest}"


async def settled(store: RunStore, record: RunRecord, lease: float) -> RunRecord:
    """The run once it no longer runs (its lease ran out, or it stopped).

    Raises:
        RuntimeError: It still runs, its lease renewed, `lease` plus `LEASE_GRACE` seconds on.
    """
    deadline = monotonic() + lease + LEASE_GRACE
    while record.status is RunStatus.RUNNING:
        if monotonic() > deadline:  # its lease renewed: its process is alive
            raise RuntimeError(f"run {record.run_id} is still running elsewhere; not taken over")
        await anyio.sleep(min(1.0, lease / 3))
        record = await store.load(record.run_id)
    return record


async def _ensure(
    engine: Engine,
    store: RunStore,
    spec: ShardSpec,
    index: int,
    inputs: tuple[ProposedFact, ...],
    *,
    defer: bool,
) -> StoredRun | RunRecord:
    """The stored run of input `index`: kept if stopped, continued if interrupted, else started.

    With `defer`, a run found running, or lost, comes back as its record, untouched.
    """
    run_id = run_id_of(spec.batch_id, index)
    given = _INPUTS.dump_json(inputs)
    deadline = monotonic() + spec.lease + LEASE_GRACE
    # A run saved every cycle claims its id with its first save, before its first cycle: start
    # it at once. One saved when it stops would run whole before finding the id taken.
    if spec.durability == "cycle" and (started := await _start(engine, inputs, run_id, index)):
        return started
    while True:
        try:
            record = await store.load(run_id)
        except RunNotFoundError:
            if started := await _start(engine, inputs, run_id, index):
                return started
            continue  # another attempt created it meanwhile: look again
        record.verify_signature(spec.signing_key)
        if _INPUTS.dump_json(record.trace.inputs) != given:
            run_id = _changed(spec, index, run_id, inputs)
            continue
        if record.status in (RunStatus.FINISHED, RunStatus.PAUSED):
            return as_stored(record, index, "kept")
        lost = record.status is RunStatus.RUNNING or record.interruption == "lost"
        if defer and lost:
            return record
        if record.status is RunStatus.INTERRUPTED:
            losses = _losses(record)
            if losses >= spec.max_losses:
                raise RuntimeError(
                    f"run {run_id} was lost {losses} times: its process died each time it ran "
                    f"(a poisoned input?); left interrupted after cycle {record.cycles}, "
                    "not continued again"
                )
            try:
                result = await engine.resume_run(run_id)
            except StaleRecordError:
                continue
            return of_result(result, index, "continued")
        if monotonic() > deadline:  # still running elsewhere, its lease renewed
            raise RuntimeError(f"run {run_id} is still running elsewhere; not taken over")
        await anyio.sleep(min(1.0, spec.lease / 3))


async def _start(
    engine: Engine, inputs: tuple[ProposedFact, ...], run_id: str, index: int
) -> StoredRun | None:
    """Start the run, or `None` when its id was taken (stored already, or taken over)."""
    try:
        result = await engine.run(inputs=inputs, run_id=run_id)
    except StaleRecordError:
        return None
    return of_result(result, index, "started")


def _changed(spec: ShardSpec, index: int, run_id: str, inputs: tuple[ProposedFact, ...]) -> str:
    """The run id to try for input `index`, whose run `run_id` was stored with other inputs.

    Raises:
        InputChangedError: The batch does not rerun changed inputs (or this is already the
            changed input's own run id).
    """
    if not spec.rerun_changed or run_id != run_id_of(spec.batch_id, index):
        raise InputChangedError(
            f"input {index} is not the one run {run_id} was stored with (changed since); "
            "kept as stored, not run (--rerun-changed runs it as a new run)"
        )
    return changed_run_id(spec.batch_id, index, inputs)
