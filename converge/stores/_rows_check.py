"""Checking a finished run stored as rows without holding it: a page of entries at a time.

`RowsCheck` takes the run's `RecordHead`, then its journal entries in order, and keeps only
what the end of the check needs: the chained digest, counts, the human decisions, each
key's leaf digests (32 bytes a fact) and a hash of each fact's reference. Every fact is
rebuilt from its stored fields (`restore_fact`, the one verifying restore), so its leaf is
computed again, never taken from the row; at the end the chain must be the head's, the
counts and decisions the head's, and the leaves, in key order, must hash to the record's
Merkle root. What it finds is what
`RunRecord.restore_context` would find in the record put together whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b
from typing import final

from pydantic import ValidationError

from .._core._canonical import merkle_root
from .._core._checkpoint import FactRecord, restore_fact
from .._core._exceptions import StoreError
from .._core._hitl import GateDecision
from .._core._key import STORED, AnyKey, key_rank
from .._core._record_head import RecordHead
from .._core._store import RowStore
from ._assembly import mismatch, unchained
from ._journal import CycleDelta, chain, genesis
from ._rows_read import entry_counts

__all__ = ["RowsCheck", "rows_problem"]


@final
class RowsCheck:
    """Feed it a finished run's entries in order (`add`), then ask what is wrong (`problem`).

    Args:
        head: The run's head, as stored.
    """

    __slots__ = (
        "_decisions",
        "_digest",
        "_entries",
        "_error",
        "_head",
        "_held",
        "_leaves",
        "_rejections",
        "_seen",
    )

    def __init__(self, head: RecordHead) -> None:
        self._head = head
        self._digest = genesis(head.record.run_id)
        self._entries = 0
        self._rejections = 0
        self._decisions: list[GateDecision] = []
        self._leaves: dict[AnyKey, list[bytes]] = {}
        self._seen: set[bytes] = set()
        self._error: str | None = None
        self._held: list[dict[str, int]] = []

    @property
    def held(self) -> list[dict[str, int]]:
        """How many facts of each key each entry checked so far holds, in order."""
        return self._held

    @property
    def facts(self) -> int:
        """Facts checked so far."""
        return len(self._seen)

    def add(self, entries: Iterable[str]) -> list[FactRecord]:
        """Check the next entries, in order; their facts, each checked against its fields.

        After a problem, nothing more is looked at (and nothing more is returned).
        """
        run_id = self._head.record.run_id
        checked: list[FactRecord] = []
        for entry in entries:
            if self._error is not None:
                return checked
            self._entries += 1
            self._digest = chain(self._digest, entry)
            try:
                delta = CycleDelta.model_validate_json(entry, context=STORED)
            except ValidationError:
                self._error = f"run {run_id}: journal entry {self._entries} is invalid"
                return checked
            self._rejections += len(delta.rejections)
            self._decisions.extend(delta.decisions)
            held: dict[str, int] = {}
            for record in delta.facts:
                held[record.key.value] = held.get(record.key.value, 0) + 1
            self._held.append(held)
            for record in delta.facts:
                try:
                    fact = restore_fact(record)
                except ValueError as error:
                    self._error = f"run {run_id}: entry {self._entries}: {error}"
                    return checked
                ref = blake2b(f"{record.key.value}/{record.id}".encode(), digest_size=16).digest()
                if ref in self._seen:
                    self._error = f"run {run_id}: fact {fact.ref} is stored twice"
                    return checked
                self._seen.add(ref)
                self._leaves.setdefault(record.key, []).append(fact.__dict__["digest"])
                checked.append(record)
        return checked

    def problem(self) -> str | None:
        """Why the entries fed so far are not the head's run; `None` when they are."""
        if self._error is not None:
            return self._error
        head = self._head
        record = head.record
        run_id = record.run_id
        problem = unchained(
            run_id, (self._entries, self._digest), (head.journal_length, head.journal_digest)
        ) or mismatch(head, self.facts, self._rejections, self._decisions)
        if problem is not None:
            return problem
        keys = sorted(self._leaves, key=key_rank)
        root = merkle_root(leaf for key in keys for leaf in self._leaves[key])
        if root != record.integrity.merkle_root:
            return (
                f"run {run_id}: its facts hash to {root}, not to the recorded Merkle root "
                f"{record.integrity.merkle_root}"
            )
        final = record.trace.final_root
        if final is not None and final != root:
            return f"run {run_id}: its trace ends at root {final}, its integrity proof says {root}"
        return None


async def rows_problem(store: RowStore, head: RecordHead, *, page: int = 16) -> str | None:
    """Why the rows of `head`'s run in `store` are not its run (`None`: they are).

    They are read `page` entries at a time; then the counts beside them (schema 8), which
    must be those the head commits to and what each entry holds.
    """
    check = RowsCheck(head)
    after = 0
    while entries := await store.journal(head.record.run_id, after=after, limit=page):
        check.add(entry for _, entry in entries)
        after = entries[-1][0]
    problem = check.problem()
    if problem is not None:
        return problem
    try:
        counted = await entry_counts(store, head)
    except StoreError as error:
        return str(error)
    for (seq, counts), held in zip(counted or (), check.held if counted else (), strict=True):
        if {key.value: n for key, n in counts.keys} != held:
            return (
                f"run {head.record.run_id}: the counts beside journal entry {seq} are not "
                "what it holds"
            )
    return None
