"""The run store contract: the `RunStore` and `RowStore` protocols and `SCHEMA_VERSION`.

The backends live in `converge.stores` (`SqliteRunStore`, `PostgresRunStore`), one module
each, so that importing converge loads no database driver. Both keep one row per run, with
searchable columns, a status and a version, under the versioned schema `SCHEMA_VERSION`.
What they save and list is defined beside this: the record (`_record`), a running run's
per-cycle saves (`_progress`), a finished or paused run stored as rows (`_record_head`)
and the listings (`_listing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, runtime_checkable

from ._checkpoint import Checkpoint
from ._listing import RunSummary
from ._progress import RunProgress
from ._record import RunRecord
from ._record_head import RecordHead, RunFinal

__all__ = ["SCHEMA_VERSION", "RowStore", "RunStore"]

SCHEMA_VERSION: Final = 8
"""The version of the tables every backend writes; a store refuses any other."""


class RunStore(Protocol):
    """Saves and loads runs by id. Any class with these methods qualifies."""

    async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
        """Save the record of `record.run_id` atomically and return its new version.

        Versions start at 1 and grow by one with every save. `expected_version=None`
        replaces whatever is stored; `0` inserts a run that must not exist; `k` replaces the
        run only while it is at version `k`, and otherwise raises `StaleRecordError` and
        saves nothing (optimistic concurrency: no decision is silently lost).
        """
        ...

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        """Save one cycle of a running run atomically and return the run's new version.

        Writes `progress.head` and the status, appends `progress.entry` to the run's journal
        (after dropping the journal when `progress.restart`), and sets the lease to now plus
        `progress.lease_seconds`. `expected_version` works as for `save` (0: a new run).
        """
        ...

    async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
        """Extend a running run's lease to now plus `lease_seconds`, keeping its version.

        Called from the engine's lease thread, in an event loop of its own, while the run's
        other calls go on in the run's loop: an implementation must allow that (the built-in
        stores do). Raises `StaleRecordError` when the run is no longer at `version`.
        """
        ...

    async def load(self, run_id: str, /) -> RunRecord:
        """The stored record with its `version` and `status`; raises `RunNotFoundError`.

        A running or interrupted run comes back assembled from its head and journal (see
        `converge.stores.assemble`), with `stop_reason=None` and its `checkpoint` the point
        to continue from.
        """
        ...

    async def list_runs(self, *, limit: int = 50) -> Sequence[RunSummary]:
        """The most recently saved runs first."""
        ...

    async def load_checkpoint(self, run_id: str, /) -> Checkpoint | None:
        """The pending checkpoint of a paused run, or `None` if it is not paused."""
        ...


@runtime_checkable
class RowStore(RunStore, Protocol):
    """A store that keeps a finished or paused run's journal as its rows (both built-in
    stores do).

    The engine ends or pauses a run saved after every cycle with `save_final` when its
    store has it, and with `save` otherwise; `converge show` and `verify` read such a run's
    head and a page of its rows at a time, `converge review` and the console's gate page a
    paused run's head.
    """

    async def save_final(self, final: RunFinal, /, *, expected_version: int) -> int:
        """Save a run's end or pause atomically and return its new version: write
        `final.head` as the run's row (and a paused run's pending gates), append
        `final.entry` to its journal, and keep the journal as its rows. `expected_version`
        works as for `save`."""
        ...

    async def load_head(self, run_id: str, /, *, paused: bool = False) -> RecordHead | None:
        """The head of a finished run stored as rows (or, with `paused`, of a paused one),
        with its `record.version`; `None` for any other run."""
        ...

    async def journal(
        self, run_id: str, /, *, after: int = 0, limit: int = 16
    ) -> list[tuple[int, str]]:
        """`(seq, entry)` of up to `limit` of the run's journal entries after `after`, in order."""
        ...

    async def entry_counts(self, run_id: str, /) -> list[tuple[int, str | None]]:
        """`(seq, counts)` of every journal entry of the run, in order, in one query: the
        `EntryCounts` JSON stored beside each (`None` for an entry written before schema 8)."""
        ...
