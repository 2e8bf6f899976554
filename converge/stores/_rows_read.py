"""What a page shows of a finished run stored as rows, read from the few entries that hold it.

`converge show` and the console's run page show a large run's head with its first and last
facts and cycles (`ends`); the console's fact pages list one key's facts a page at a time
(`key_facts`), from the entries nearest the end of the run they are at, one entry at a time.
What is read is checked against its own digest (`broken`); the chain of the entries is not
(`converge verify` checks every row, `rows_check`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, cast, final

from pydantic import TypeAdapter, ValidationError

from .._core._checkpoint import FactRecord, restore_fact
from .._core._exceptions import StoreError
from .._core._key import STORED
from .._core._store import RecordHead, RowStore
from .._core._trace import CycleTrace
from ._journal import CycleDelta

__all__ = ["SHOWN_FACTS", "WHOLE_SHOW", "Ends", "broken", "ends", "key_facts", "large"]

SHOWN_FACTS: Final = 20
"""How many of the first and of the last facts are shown of a large run stored as rows."""
WHOLE_SHOW: Final = 1_000
"""The most facts of a run stored as rows that `show`, `review` and the console still read
whole."""


_FACTS: Final = TypeAdapter(tuple[FactRecord, ...])


def large(head: RecordHead | None) -> bool:
    """Whether `head` is that of a run with more than `WHOLE_SHOW` facts (read from it alone)."""
    return head is not None and head.record.integrity.fact_count > WHOLE_SHOW


@final
@dataclass(frozen=True, slots=True)
class Ends:
    """The first and last facts of a run stored as rows, in promotion order, and cycles.

    `cycles` are the cycle traces of the entries that held them.
    """

    first: tuple[FactRecord, ...]
    last: tuple[FactRecord, ...]
    cycles: tuple[CycleTrace, ...]
    """The cycles of the first and last entries read, by cycle number, each once."""


async def _entry(store: RowStore, run_id: str, seq: int) -> CycleDelta:
    """Journal entry `seq` (from 1) of `run_id`.

    Raises:
        StoreError: The entry is missing or invalid.
    """
    page = await store.journal(run_id, after=seq - 1, limit=1)
    if not page or page[0][0] != seq:
        raise StoreError(f"run {run_id}: journal entry {seq} is missing")
    try:
        return CycleDelta.model_validate_json(page[0][1], context=STORED)
    except ValidationError:
        raise StoreError(f"run {run_id}: journal entry {seq} is invalid") from None


async def ends(store: RowStore, head: RecordHead) -> Ends:
    """The first and the last `SHOWN_FACTS` facts of a run stored as rows, in promotion order.

    From as few of its first and last entries as hold them.

    Raises:
        StoreError: An entry read is missing or invalid.
    """
    run_id = head.record.run_id
    shown = SHOWN_FACTS
    cycles: dict[int, CycleTrace] = {}
    first: list[FactRecord] = []
    seq = 0
    while len(first) < shown and seq < head.journal_length:
        seq += 1
        delta = await _entry(store, run_id, seq)
        first += delta.facts
        cycles.update((cycle.cycle, cycle) for cycle in delta.cycles)
    last: list[FactRecord] = []
    seq = head.journal_length + 1
    while len(last) < shown and seq > 1:
        seq -= 1
        delta = await _entry(store, run_id, seq)
        last = [*delta.facts, *last]
        cycles.update((cycle.cycle, cycle) for cycle in delta.cycles)
    first.sort(key=_clock)
    last.sort(key=_clock)
    ordered = tuple(cycles[number] for number in sorted(cycles))
    return Ends(tuple(first[:shown]), tuple(last[-shown:]), ordered)


def _clock(fact: FactRecord) -> int:
    return fact.promotion.clock


def broken(run_id: str, facts: Iterable[FactRecord]) -> str | None:
    """Why one of `facts` does not match its own digest (`None`: each does)."""
    for fact in facts:
        try:
            restore_fact(fact)
        except ValueError as error:
            return f"run {run_id}: {error}"
    return None


def _of_key(run_id: str, seq: int, entry: str, key: str) -> list[object]:
    """The facts of `key` in journal entry `seq`, as parsed JSON, in the entry's order.

    Raises:
        StoreError: The entry is not a JSON object with a list of facts.
    """
    try:
        document: object = json.loads(entry)
    except ValueError:
        document = None
    facts = cast("dict[str, object]", document).get("facts") if isinstance(document, dict) else None
    if not isinstance(facts, list):
        raise StoreError(f"run {run_id}: journal entry {seq} is invalid")
    return [
        fact
        for fact in cast("list[object]", facts)
        if isinstance(fact, dict) and cast("dict[str, object]", fact).get("key") == key
    ]


async def key_facts(
    store: RowStore, head: RecordHead, key: str, start: int, count: int
) -> tuple[FactRecord, ...]:
    """Facts `start` to `start + count` (from 0, in the run's order) of `key`'s facts.

    Read one entry at a time from the end of the run nearer to them, so the last page costs
    what the first does; only the entries that hold them are validated. Fewer than asked
    when the rows hold fewer than the head says (the caller compares).

    Raises:
        StoreError: An entry read is missing or invalid.
    """
    run_id = head.record.run_id
    total = sum(n for name, n in head.keys if name.value == key)
    end = min(start + count, total)
    if start >= end:
        return ()
    backward = start >= total - end
    seqs = range(head.journal_length, 0, -1) if backward else range(1, head.journal_length + 1)
    picked: list[object] = []
    position = total if backward else 0  # of the next fact of `key` the scan meets
    for seq in seqs:
        page = await store.journal(run_id, after=seq - 1, limit=1)
        if not page or page[0][0] != seq:
            raise StoreError(f"run {run_id}: journal entry {seq} is missing")
        facts = _of_key(run_id, seq, page[0][1], key)
        low, high = (
            (position - len(facts), position) if backward else (position, position + len(facts))
        )
        wanted = facts[max(start, low) - low : max(min(end, high) - low, 0)]
        picked = [*wanted, *picked] if backward else [*picked, *wanted]
        position = low if backward else high
        if (backward and low <= start) or (not backward and high >= end):
            break
    try:
        return _FACTS.validate_json(json.dumps(picked), context=STORED)
    except ValidationError:
        raise StoreError(f"run {run_id}: a stored fact of {key} is invalid") from None
