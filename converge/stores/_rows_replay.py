"""Replaying a finished run stored as rows without holding it: its cycles, a page at a time.

`JournalCycles` reads the run's journal entries in order, `page` entries at a time, as the
replay reaches them (`converge._kernel._replay.RecordedEffects` reads one cycle ahead), and
gives their cycle traces one by one. Of an entry only its cycle traces are validated (with
the keys the formation declared by then, as a stored trace is): its facts' records are
never built. Each entry's JSON goes into the chained digest as `converge verify` chains it
(`_journal.chain`); once the last entry is read, the chain must be the head's, or the
replay fails. A cycle an entry records again (the last one saved, rewritten since: human
decisions, violations) replaces the one read before, as `_assembly.assemble_final` has it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import ClassVar, final

from pydantic import BaseModel, ConfigDict, ValidationError

from .._core._exceptions import ReplayError
from .._core._key import STORED
from .._core._record_head import RecordHead
from .._core._store import RowStore
from .._core._trace import CycleTrace
from ._assembly import said, unchained
from ._journal import chain, genesis

__all__ = ["JournalCycles"]


@final
class _EntryCycles(BaseModel, frozen=True):
    """A journal entry read for its cycle traces alone (its facts are skipped, never built)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="ignore", strict=True)

    cycles: tuple[CycleTrace, ...] = ()


@final
class JournalCycles(AsyncIterator[CycleTrace]):
    """The cycle traces of the finished run `head` heads in `store`, in cycle order.

    Args:
        store: The store that holds the run's rows.
        head: The run's head, as stored (its signature checked by the caller, with a key).
        page: How many entries one read takes.

    Raises (from iterating):
        ReplayError: An entry is invalid, records a cycle out of order, or the entries do
            not chain to the head's digest (one was changed, dropped, added or reordered).
    """

    __slots__ = (
        "_after",
        "_digest",
        "_done",
        "_entries",
        "_head",
        "_held",
        "_page",
        "_ready",
        "_store",
    )

    def __init__(self, store: RowStore, head: RecordHead, *, page: int = 16) -> None:
        self._store = store
        self._head = head
        self._page = page
        self._after = 0
        self._entries = 0
        self._digest = genesis(head.record.run_id)
        self._held: CycleTrace | None = None
        """The last cycle read: a later entry may record it again."""
        self._ready: deque[CycleTrace] = deque()
        self._done = False

    async def __anext__(self) -> CycleTrace:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            await self._read()
        return self._ready.popleft()

    async def _read(self) -> None:
        """Read the next page of entries; at the end, check the chain."""
        head = self._head
        run_id = head.record.run_id
        entries = await self._store.journal(run_id, after=self._after, limit=self._page)
        if not entries:
            self._done = True
            read, stored = (self._entries, self._digest), (head.journal_length, head.journal_digest)
            problem = unchained(run_id, read, stored)
            if problem is not None:
                raise ReplayError(problem)
            if self._held is not None:
                self._ready.append(self._held)
                self._held = None
            return
        for _, entry in entries:
            self._entries += 1
            self._digest = chain(self._digest, entry)
            try:
                cycles = _EntryCycles.model_validate_json(entry, context=STORED).cycles
            except ValidationError as error:
                raise ReplayError(
                    f"run {run_id}: journal entry {self._entries} is invalid ({said(error)})"
                ) from None
            for cycle in cycles:
                self._take(cycle)
        self._after = entries[-1][0]

    def _take(self, cycle: CycleTrace) -> None:
        """Hold `cycle`, releasing the one held before when `cycle` comes after it."""
        held = self._held
        if held is None or cycle.cycle > held.cycle:
            if held is not None:
                self._ready.append(held)
            self._held = cycle
        elif cycle.cycle != held.cycle:
            raise ReplayError(
                f"run {self._head.record.run_id}: journal entry {self._entries} records cycle "
                f"{cycle.cycle} after cycle {held.cycle}"
            )
        else:
            self._held = cycle
