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
from hashlib import sha256
from time import monotonic
from typing import Final, final

import anyio
from pydantic import TypeAdapter

from ._cli_support import load_formation
from ._durable import Durability
from ._engine import Engine
from ._exceptions import RunNotFoundError, StaleRecordError
from ._formation import Formation
from ._grouped import grouped
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._result import ConvergeResult
from ._stop import RunStatus, StopReason
from ._store import RunRecord, RunStore, failure_count
from ._trace import RunTrace

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
    """What this batch did with it: `"started"`, `"continued"` or `"kept"` (already stopped),
    or `"found"` (stored by an attempt of this batch whose task failed after)."""
    failures: int = 0
    """Its failed calls not made good and rolled-back effects (`RunRecord.failure_count`)."""
    first_failure: str | None = None
    """The first of them: `"suggestor (phase, cycle N, outcome): error"` or
    `"invariant (cycle N): reason"`; `None` without failures."""

    @property
    def with_failures(self) -> bool:
        """Whether it converged with failures (`converge run` would exit 9)."""
        return self.failures > 0 and self.stop_reason == "converged"

    @property
    def outcome(self) -> str:
        """Its stop reason (status while it has none), or `"converged_with_failures"`."""
        if self.with_failures:
            return "converged_with_failures"
        return self.stop_reason or self.status.value


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
    def complete(self) -> bool:
        """Whether every input ended as a stored run (whatever its stop reason)."""
        return not self.failures

    @property
    def with_failures(self) -> tuple[StoredRun, ...]:
        """The stored runs that converged with failed calls or rolled-back effects."""
        return tuple(run for run in self.runs if run.with_failures)

    @property
    def ok(self) -> bool:
        """Whether every input ended as a stored run and none converged with failures (runs
        that stopped for another reason, a budget or a gate, are in `counts`)."""
        return self.complete and not self.with_failures

    def counts(self) -> dict[str, int]:
        """How many stored runs ended with each outcome: the stop reason (status when not
        stopped), with `"converged_with_failures"` apart from `"converged"`."""
        found: dict[str, int] = {}
        for run in self.runs:
            found[run.outcome] = found.get(run.outcome, 0) + 1
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
    rerun_changed: bool = False
    """Run an input that changed since its run was stored as a new run (`changed_run_id`)."""
    max_losses: int = 3
    """Times a run may be lost (its process died) before it is not continued again."""


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
        converge._cli_support.CliError: The formation cannot be imported.
    """
    formation, cached = _cached(spec)
    store = grouped(cached)  # per shard: its saves are grouped in this shard's event loop
    limiter = anyio.CapacityLimiter(spec.runs_per_worker)
    done: list[StoredRun | BatchFailure] = []
    later: list[tuple[ShardItem, RunRecord]] = []

    def failed(item: ShardItem, error: Exception) -> BatchFailure:
        text = f"{type(error).__name__}: {error}"
        return BatchFailure(
            index=item.index, run_id=run_id_of(spec.batch_id, item.index), error=text
        )

    async def ensure(item: ShardItem, *, defer: bool) -> None:
        try:
            engine = formation.engine(
                store=store, formation=spec.locator, lease=spec.lease, durability=spec.durability
            )
            inputs = _inputs(item.inputs)
            outcome = await _ensure(engine, store, spec, item.index, inputs, defer=defer)
        except Exception as error:
            done.append(failed(item, error))
            return
        if isinstance(outcome, StoredRun):
            done.append(outcome)
        else:
            later.append((item, outcome))

    async def first(item: ShardItem) -> None:
        async with limiter:
            await ensure(item, defer=True)

    async def settle(item: ShardItem, record: RunRecord, into: list[tuple[int, int]]) -> None:
        try:
            record = await settled(store, record, spec.lease)
        except Exception as error:
            done.append(failed(item, error))
            return
        into.append((_losses(record), item.index))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(first, item)
        deferred = {item.index: item for item, _ in later}
        order: list[tuple[int, int]] = []
        async with anyio.create_task_group() as group:
            for item, record in later:
                group.start_soon(settle, item, record, order)
        later.clear()
        for _, index in sorted(order):
            await ensure(deferred[index], defer=False)

    anyio.run(main)
    return sorted(done, key=lambda entry: entry.index)


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
    # A run saved every cycle claims its id before its first cycle (its first save must
    # insert it): start it at once, and look in the store only when the id is taken. A run
    # saved once, when it stops, would run whole before finding out: look first.
    optimistic = spec.durability == "cycle"
    while True:
        if optimistic:
            optimistic = False
            try:
                result = await engine.run(inputs=inputs, run_id=run_id)
            except StaleRecordError:
                pass  # stored already (or taken over meanwhile): look at it
            else:
                return _from_result(result, index, "started")
        try:
            record = await store.load(run_id)
        except RunNotFoundError:
            try:
                result = await engine.run(inputs=inputs, run_id=run_id)
            except StaleRecordError:
                continue  # another attempt created it meanwhile: look again
            return _from_result(result, index, "started")
        if _INPUTS.dump_json(record.trace.inputs) != given:
            if not spec.rerun_changed or run_id != run_id_of(spec.batch_id, index):
                raise InputChangedError(
                    f"input {index} is not the one run {run_id} was stored with "
                    "(changed since); kept as stored, not run "
                    "(--rerun-changed runs it as a new run)"
                )
            run_id = changed_run_id(spec.batch_id, index, inputs)
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
            return _from_result(result, index, "continued")
        if monotonic() > deadline:  # still running elsewhere, its lease renewed
            raise RuntimeError(f"run {run_id} is still running elsewhere; not taken over")
        await anyio.sleep(min(1.0, spec.lease / 3))


def _from_result(result: ConvergeResult, index: int, action: str) -> StoredRun:
    """The stored run of a result this worker just saved (no need to read it back)."""
    stop = result.stop_reason
    paused = stop is StopReason.AWAITING_HUMAN
    return StoredRun(
        index=index,
        run_id=result.run_id,
        status=RunStatus.PAUSED if paused else RunStatus.FINISHED,
        stop_reason=stop.value,
        merkle_root=result.integrity.merkle_root,
        action=action,
        failures=failure_count(result.trace),
        first_failure=first_failure(result.trace),
    )


def as_stored(record: RunRecord, index: int, action: str) -> StoredRun:
    stop = record.stop_reason
    return StoredRun(
        index=index,
        run_id=record.run_id,
        status=record.status,
        stop_reason=None if stop is None else stop.value,
        merkle_root=record.integrity.merkle_root,
        action=action,
        failures=record.failure_count,
        first_failure=first_failure(record.trace),
    )


def first_failure(trace: RunTrace) -> str | None:
    """The first failed call not made good, else the first rolled-back effect, as one line."""
    for failure in trace.failures():
        cycle = next((c.cycle for c in trace.cycles if failure in c.executions), 0)
        return (
            f"{failure.suggestor} ({failure.phase}, cycle {cycle}, {failure.outcome}): "
            f"{failure.error or 'no error text'}"
        )
    for violation in trace.rolled_back():
        return f"{violation.invariant} (cycle {violation.cycle}): {violation.reason}"
    return None
