"""A run's lineage in the console: the run it was forked from and its forks.

A run page shows its parent (whether the store has it, whether its signature check failed,
whether the lineage verifies as `converge verify` checks it) and the forks of it among the
newest runs. Only the runs whose listing names it as their parent are read, each once while
it is not saved again; a large finished run stored as rows is read from its head.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import final

import anyio

from .._core._exceptions import RunNotFoundError
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._store import RowStore, RunStore
from .._kernel._fork import lineage_problem
from .._review import check_signature, signing_key
from ._fork_page import Family, Forked

__all__ = ["Lineage"]

_Listed = tuple[str | None, int, bool]
"""A listed run's parent (`None`: it is no fork), its fork cycle, and whether its
signature check failed."""


def _no_listed() -> dict[tuple[str, datetime], _Listed]:
    return {}


@final
@dataclass(frozen=True, slots=True)
class Lineage:
    """The console's parent and forks of a run, over one store."""

    store: RunStore
    limit: int
    """How many of the newest runs to search for a run's forks."""
    _listed: dict[tuple[str, datetime], _Listed] = field(default_factory=_no_listed)
    """Each listed fork's lineage by its id and save time: a record saved again is read
    again, one that was not is not."""

    async def family(self, record: RunRecord) -> Family:
        """`record`'s parent and its forks among the newest runs.

        For the parent: whether the store has it, whether its signature check failed, and
        whether the lineage verifies as `converge verify` checks it.
        """
        key = signing_key()
        lineage = record.lineage
        present, failed, problem = False, "", None
        if lineage is not None:
            parent, failed = await self._parent(lineage.parent_run_id, key, heads=False)
            present = parent is not None
            trusted = parent if isinstance(parent, RunRecord) and not failed else None
            problem = await anyio.to_thread.run_sync(lambda: lineage_problem(record, trusted))
        forks, scanned = await self._forks(record.run_id, key)
        return Family(present, forks, scanned, failed, problem)

    async def head_family(self, head: RecordHead) -> Family:
        """`family` of a large finished run stored as rows, from heads alone.

        The parent's presence and signature are read from its head when it has one; the
        lineage is not checked (that needs the fork's facts): `converge verify` checks it.
        """
        key = signing_key()
        record = head.record
        lineage = record.lineage
        present, failed = False, ""
        if lineage is not None:
            parent, failed = await self._parent(lineage.parent_run_id, key, heads=True)
            present = parent is not None
        forks, scanned = await self._forks(record.run_id, key)
        return Family(present, forks, scanned, failed, None, lineage_checked=lineage is None)

    async def _parent(
        self, run_id: str, key: bytes | None, *, heads: bool
    ) -> tuple[RunRecord | RecordHead | None, str]:
        """A fork's parent, and what its failed signature check said (`""`: it did not).

        `None` when the store does not have it; its head when `heads` and it is a finished
        run stored as rows.
        """
        try:
            parent = await (self._head_or_record(run_id) if heads else self.store.load(run_id))
        except RunNotFoundError:
            return None, ""
        check = check_signature(parent, key)
        return parent, check.message if check.failed else ""

    async def _head_or_record(self, run_id: str) -> RunRecord | RecordHead:
        """The head of `run_id` when it is a finished run stored as rows, else its record.

        Raises:
            RunNotFoundError: The store has no run `run_id`.
        """
        store = self.store
        head = await store.load_head(run_id) if isinstance(store, RowStore) else None
        return head if head is not None else await store.load(run_id)

    async def _forks(self, run_id: str, key: bytes | None) -> tuple[tuple[Forked, ...], int]:
        """The forks of `run_id` among the newest runs, and how many runs were searched.

        Only the runs whose listing names `run_id` as their parent are read (their head, or
        their record), each once while it is not saved again: each must say so itself, and
        its signature is checked.
        """
        listed = await self.store.list_runs(limit=self.limit)
        forks: list[Forked] = []
        marks = {(summary.run_id, summary.saved_at) for summary in listed}
        for stale in [mark for mark in self._listed if mark not in marks]:
            del self._listed[stale]  # keep what the newest runs need, no more
        for summary in listed:
            if summary.parent_run_id != run_id or summary.run_id == run_id:
                continue
            mark = (summary.run_id, summary.saved_at)
            found = self._listed.get(mark)
            if found is None:
                found = self._listed[mark] = await self._lineage_of(summary.run_id, key)
            parent_id, at_cycle, bad = found
            if parent_id == run_id:
                forks.append(Forked(summary.run_id, at_cycle, summary.outcome, bad))
        return tuple(forks), len(listed)

    async def _lineage_of(self, run_id: str, key: bytes | None) -> _Listed:
        """A listed run's parent and fork cycle, and whether its signature check failed.

        The parent is `None` when the run is no fork or its record cannot be read. A
        finished run stored as rows is read from its head.
        """
        try:
            other = await self._head_or_record(run_id)
        except Exception:  # one unreadable row hides no other fork
            return (None, 0, False)
        lineage = other.record.lineage if isinstance(other, RecordHead) else other.lineage
        if lineage is None:
            return (None, 0, False)
        bad = check_signature(other, key).failed
        return (lineage.parent_run_id, lineage.at_cycle, bad)
