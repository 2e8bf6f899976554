"""Durable runs: a save after every merged cycle, a lease kept alive, and a cancelled run kept.

With a store and `durability="cycle"` (the default with a store), `Engine` gives each run a
`CycleSaver`. The run loop calls `saved` before every cycle (the run as it stands after the
last merged one, which the first call also claims: a new run must not exist, a resumed one
must still be at the version it was read at), and `interrupted`, shielded, when its caller
cancels it. `with_lease` has `LEASES` renew the lease from a thread of its own while the run
goes on, so the run never looks dead while its process lives, even when a suggestor blocks
the run's event loop. `finish` saves the finished or paused record over it: the run's journal
stays as its rows under a small head (`RunFinal`) when the store keeps rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from time import monotonic
from typing import TYPE_CHECKING, Final, Literal, TypeVar, final

import anyio

from .._core._context import ContextSnapshot
from .._core._exceptions import ConfigurationError, StaleRecordError, StoreError
from .._core._record import Deferred, RunRecord, kept_facts, record_of
from .._core._result import ConvergeResult
from .._core._stop import RunStatus
from .._core._store import RowStore, RunStore
from .._kernel._log import warn
from ._journal import Journal
from ._lease import LEASES

if TYPE_CHECKING:
    from .._kernel._state import RunState

__all__ = ["DEFAULT_LEASE", "CycleSaver", "Durability", "RunKeeper", "with_lease"]

Durability = Literal["cycle", "exit"]
"""When a run with a store is saved: after every merged cycle, or only when it stops."""

DEFAULT_LEASE: Final = 30.0
"""Seconds a running run counts as alive without a save or a renewal."""

T = TypeVar("T")


@final
class CycleSaver:
    """Saves one run after every merged cycle, at the version it last saved.

    Args:
        store: Where the run is saved.
        journal: Turns the run's state into per-cycle saves.
        version: The stored version the first save must find (0: a new run).
        lease: Seconds the run counts as running after each save or renewal.
    """

    __slots__ = ("_fresh_at", "_journal", "_lease", "_lock", "_store", "_version")

    def __init__(self, store: RunStore, journal: Journal, *, version: int, lease: float) -> None:
        self._store = store
        self._journal = journal
        self._version = version
        self._lease = lease
        self._lock = anyio.Lock()
        self._fresh_at = monotonic()

    @property
    def version(self) -> int:
        """The stored version of the run after the last save."""
        return self._version

    async def saved(self, state: RunState, elapsed: float) -> None:
        """Save the run as it stands after its last merged cycle (shielded from cancellation).

        Raises:
            StaleRecordError: Someone else saved the run since (it was continued or resumed
                elsewhere); nothing was saved.
            StoreError: The store failed.
        """
        await self._save(state, elapsed, RunStatus.RUNNING)

    async def interrupted(self, state: RunState, elapsed: float) -> bool:
        """Mark the run interrupted at its last merged cycle; whether that was saved.

        Never raises (a failure is logged): the cancellation must propagate, not a store error.
        """
        try:
            await self._save(state, elapsed, RunStatus.INTERRUPTED)
        except Exception as error:
            warn(
                "converge.durable",
                "interrupted run not saved",
                run_id=state.run_id,
                error=f"{type(error).__name__}: {error}",
            )
            return False
        return True

    async def _save(
        self,
        state: RunState,
        elapsed: float,
        status: Literal[RunStatus.RUNNING, RunStatus.INTERRUPTED],
    ) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                progress = self._journal.progress(
                    state, elapsed=elapsed, status=status, lease_seconds=self._lease
                )
                try:
                    version = await self._store.save_progress(
                        progress, expected_version=self._version
                    )
                except StoreError:
                    raise
                except Exception as error:
                    raise StoreError(
                        f"run {state.run_id}: cycle {state.cycle} could not be saved: "
                        f"{type(error).__name__}: {error}"
                    ) from error
                self._journal.commit(progress)
                if state.texts:  # in the store now: the next entry starts after them
                    state.texts.clear()
                self._version = version
                self._fresh_at = monotonic()

    @property
    def run_id(self) -> str:
        """The run it saves."""
        return self._journal.run_id

    @property
    def lease(self) -> float:
        """Seconds the run counts as running after each save or renewal."""
        return self._lease

    @property
    def fresh_at(self) -> float:
        """When (`time.monotonic`) the run was last saved or its lease renewed."""
        return self._fresh_at

    async def renew(self, version: int) -> None:
        """Renew the lease at `version` (from `LEASES`' thread, not the run's loop).

        Raises:
            StaleRecordError: The run is no longer at `version`.
        """
        await self._store.renew_lease(self.run_id, version=version, lease_seconds=self._lease)
        self._fresh_at = monotonic()

    async def finish(
        self,
        record: RunRecord,
        context: ContextSnapshot,
        whole: Callable[[], RunRecord] | None = None,
    ) -> RunRecord | None:
        """Save the finished or paused record over the running one.

        As rows (its head and the last journal entry) when the store keeps rows and the
        record allows it (`Journal.final`), whole otherwise: with `whole`, `record` leaves
        its facts out (a run saved as rows needs no record of them), and `whole()` builds it
        with them. Returns the record saved whole, `None` when the run was saved as rows.
        """
        async with self._lock:
            store, version = self._store, self._version
            if isinstance(store, RowStore) and (final := self._journal.final(record, context)):
                self._version = await store.save_final(final, expected_version=version)
                return None
            saved = record if whole is None else whole()
            self._version = await store.save(saved, expected_version=version)
            return saved


async def with_lease(saver: CycleSaver | None, work: Callable[[], Awaitable[T]]) -> T:
    """`await work()`, with the run's lease kept alive meanwhile from `LEASES`' thread."""
    if saver is None:
        return await work()
    LEASES.hold(saver)
    try:
        return await work()
    finally:
        LEASES.release(saver)


@final
class RunKeeper:
    """Where an engine's runs are saved, and when: after every cycle, or when they stop."""

    __slots__ = ("_durability", "_key", "_label", "_lease", "store")

    def __init__(
        self,
        store: RunStore | None,
        *,
        durability: Durability,
        lease: float,
        label: tuple[str | None, str | None],
        key: bytes | None,
    ) -> None:
        if durability not in ("cycle", "exit"):
            raise ConfigurationError(f"durability must be 'cycle' or 'exit', got {durability!r}")
        if not lease > 0:
            raise ConfigurationError(f"lease must be positive, got {lease}")
        self.store = store
        self._durability = durability
        self._lease = lease
        self._label = label
        self._key = key

    @property
    def saves_whole(self) -> bool:
        """Whether a stopped run's record is saved with its facts' records, made as it ends.

        So with any store but one that keeps rows of a run saved after every cycle, unsigned:
        `save` defers those (and a paused run's are its checkpoint's).
        """
        store = self.store
        if store is None:
            return False
        rows = isinstance(store, RowStore) and self._durability == "cycle"
        return not rows or self._key is not None

    def saver(
        self, run_id: str, fingerprint: tuple[tuple[str, ...], tuple[str, ...]], version: int
    ) -> CycleSaver | None:
        """The per-cycle saver of a run at stored `version`; `None` unless `"cycle"`."""
        store = self.store
        if store is None or self._durability != "cycle":
            return None
        name, formation = self._label
        journal = Journal(run_id, fingerprint, name=name, formation=formation, key=self._key)
        return CycleSaver(store, journal, version=version, lease=self._lease)

    async def save(
        self, result: ConvergeResult, expected_version: int, saver: CycleSaver | None
    ) -> ConvergeResult:
        """Save the finished or paused `result` (shielded), at the version it must find.

        Raises:
            StaleRecordError: Someone else saved the run since (`error.result` keeps it).
            StoreError: Saving failed (`error.result` keeps the run).
        """
        store = self.store
        if store is None:
            return result
        name, formation = self._label
        # A run saved as rows, unsigned and not paused, needs no record of its facts: its
        # journal holds them, and `RunRecord.saved` builds that record on first use.
        deferred = saver is not None and not self.saves_whole and result.checkpoint is None
        if deferred:
            record = record_of(result, (), None, name=name, formation=formation)
            whole = partial(self._whole, result)
        else:
            record, whole = self._whole(result), None
        try:
            with anyio.CancelScope(shield=True):
                if saver is None:
                    await store.save(record, expected_version=expected_version)
                elif (saved := await saver.finish(record, result.context, whole)) is not None:
                    record, deferred = saved, False
        except StaleRecordError as error:
            error.result = result
            raise
        except Exception as error:
            raise StoreError(
                f"run {result.run_id} ({result.stop_reason.value}) could not be saved: "
                f"{type(error).__name__}: {error}",
                result=result,
            ) from error
        # once, before anyone else sees it
        object.__setattr__(result, "_saved", Deferred(record) if deferred else record)
        return result

    def _whole(self, result: ConvergeResult) -> RunRecord:
        """The record of `result` with its facts' records.

        Those the run's end checked and made (`RunLoop`'s `keep_facts`, not checked again),
        those of its checkpoint (a paused run's, made as it paused), else made and checked.
        """
        name, formation = self._label
        facts = kept_facts(result)
        if facts is None and result.checkpoint is not None:
            facts = result.checkpoint.facts
        if facts is None:
            return RunRecord.of(result, name=name, formation=formation, key=self._key)
        return record_of(result, facts, None, name=name, formation=formation, key=self._key)
