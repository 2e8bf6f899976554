"""What a page shows of a finished run stored as rows, read from the few entries that hold it.

`converge show` and the console's run page show a large run's head with its first and last
facts and cycles (`ends`); the console's fact pages list one key's facts a page at a time
(`key_facts`), from the entries that hold them, found by the counts stored beside each entry
(or, for rows written before schema 8, from the end of the run nearer to them).
What is read is checked against its own digest (`broken`); the chain of the entries is not
(`converge verify` checks every row, `rows_check`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar, cast, final

from pydantic import TypeAdapter, ValidationError

from .._core._checkpoint import FactRecord, restore_fact
from .._core._escape import visible
from .._core._exceptions import StoreError
from .._core._key import STORED
from .._core._progress import EntryCounts
from .._core._record_head import RecordHead
from .._core._store import RowStore
from .._core._trace import CycleTrace
from ._journal import chain, counts_genesis

__all__ = [
    "SHOWN_FACTS",
    "WHOLE_SHOW",
    "Ends",
    "broken",
    "ends",
    "entry_counts",
    "facts_at",
    "key_facts",
    "large",
    "located",
]

SHOWN_FACTS: Final = 20
"""How many of the first and of the last facts are shown of a large run stored as rows."""
WHOLE_SHOW: Final = 1_000
"""The most facts of a run stored as rows that `show`, `review` and the console still read
whole."""


_FACTS: Final = TypeAdapter(tuple[FactRecord, ...])
_T = TypeVar("_T")


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
    """The cycles of the first and last entries read, by cycle number, each once, without
    the effects their calls recorded (`Execution.effect` is `None`)."""


async def _entry(store: RowStore, run_id: str, seq: int) -> tuple[list[_Raw], list[object]]:
    """The facts and the cycle traces of journal entry `seq` (from 1) of `run_id`, as JSON.

    Parsed, not validated: of an entry's thousand facts a page shows a few, and validating
    only those (`_checked`) makes `show` of a large run a third cheaper.

    Raises:
        StoreError: The entry is missing, or not an object with lists of facts and cycles
            whose facts each have a promotion clock.
    """
    page = await store.journal(run_id, after=seq - 1, limit=1)
    if not page or page[0][0] != seq:
        raise StoreError(f"run {run_id}: journal entry {seq} is missing")
    invalid = StoreError(f"run {run_id}: journal entry {seq} is invalid")
    try:
        document: object = json.loads(page[0][1])
    except ValueError:
        raise invalid from None
    if not isinstance(document, dict):
        raise invalid
    fields = cast("dict[str, object]", document)
    facts, cycles = fields.get("facts", []), fields.get("cycles", [])
    if not isinstance(facts, list) or not isinstance(cycles, list):
        raise invalid
    raw: list[_Raw] = []
    for fact in cast("list[object]", facts):
        record = cast("dict[str, object]", fact) if isinstance(fact, dict) else {}
        promotion = record.get("promotion")
        clock = (
            cast("dict[str, object]", promotion).get("clock")
            if isinstance(promotion, dict)
            else None
        )
        if not isinstance(clock, int):
            raise invalid
        raw.append((clock, record))
    return raw, cast("list[object]", cycles)


_Raw = tuple[int, object]
"""A fact as parsed JSON, with its promotion clock."""

_CYCLES: Final = TypeAdapter(tuple[CycleTrace, ...])


def _checked(run_id: str, adapter: TypeAdapter[_T], parsed: list[object], what: str) -> _T:
    """`parsed` JSON records validated as stored ones.

    Raises:
        StoreError: One is not valid (named by its `key/id` or `cycle`, when it has them).
    """
    try:
        return adapter.validate_json(json.dumps(parsed), context=STORED)
    except ValidationError as error:
        where = error.errors()[0]["loc"]
        item = parsed[where[0]] if where and isinstance(where[0], int) else None
        raise StoreError(f"run {run_id}: {what}{_named(item)} is invalid") from None


def _named(item: object) -> str:
    """` key/id` of a parsed fact, ` of cycle N` of a parsed cycle, made visible; else ``."""
    fields = cast("dict[str, object]", item) if isinstance(item, dict) else {}
    if "key" in fields and "id" in fields:
        return f" {visible(str(fields['key']))}/{visible(str(fields['id']))}"
    if "cycle" in fields:
        return f" of cycle {visible(str(fields['cycle']))}"
    return ""


async def ends(store: RowStore, head: RecordHead) -> Ends:
    """The first and the last `SHOWN_FACTS` facts of a run stored as rows, in promotion order.

    From as few of its first and last entries as hold them.

    Raises:
        StoreError: An entry read is missing or invalid.
    """
    run_id = head.record.run_id
    shown = SHOWN_FACTS
    cycles: dict[int, object] = {}
    first: list[_Raw] = []
    seq = 0
    while len(first) < shown and seq < head.journal_length:
        seq += 1
        facts, traces = await _entry(store, run_id, seq)
        first += facts
        cycles.update(_numbered(run_id, seq, traces))
    last: list[_Raw] = []
    seq = head.journal_length + 1
    while len(last) < shown and seq > 1:
        seq -= 1
        facts, traces = await _entry(store, run_id, seq)
        last = [*facts, *last]
        cycles.update(_numbered(run_id, seq, traces))
    first.sort(key=_clock)
    last.sort(key=_clock)
    chosen = [fact for _, fact in first[:shown]], [fact for _, fact in last[-shown:]]
    return Ends(
        _checked(run_id, _FACTS, chosen[0], "stored fact"),
        _checked(run_id, _FACTS, chosen[1], "stored fact"),
        _checked(run_id, _CYCLES, [cycles[number] for number in sorted(cycles)], "stored cycle"),
    )


def _numbered(run_id: str, seq: int, traces: list[object]) -> Iterable[tuple[int, object]]:
    """Each of `traces` (parsed JSON) with its cycle number.

    Raises:
        StoreError: One has no cycle number.
    """
    for trace in traces:
        fields = cast("dict[str, object]", trace) if isinstance(trace, dict) else {}
        number = fields.get("cycle")
        calls = fields.get("executions")
        if not isinstance(number, int) or not isinstance(calls, list):
            raise StoreError(f"run {run_id}: journal entry {seq} is invalid")
        # a timeline shows a call's outcome and duration; the effect it recorded (every
        # proposal, a thousand a cycle here) is left out, as the validation it would cost
        bare = [
            {**cast("dict[str, object]", call), "effect": None} if isinstance(call, dict) else call
            for call in cast("list[object]", calls)
        ]
        yield number, {**fields, "executions": bare}


def _clock(fact: _Raw) -> int:
    return fact[0]


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

    Found by the counts stored beside the entries (`located`): only the entries that hold
    them are read, and each is checked to hold what its counts say. A run with an entry
    without counts (written before schema 8) is read one entry at a time from the end of the
    run nearer to them, so the last page costs what the first does. Only the facts returned
    are validated. Fewer than asked when the rows hold fewer than the head says (the caller
    compares).

    Raises:
        StoreError: An entry read is missing or invalid, or its counts are not what it holds
            or what the head's `counts_digest` commits to.
    """
    run_id = head.record.run_id
    total = sum(n for name, n in head.keys if name.value == key)
    end = min(start + count, total)
    if start >= end:
        return ()
    counted = await entry_counts(store, head)
    if counted is None:
        return await _scanned(store, head, key, (start, end, total))
    return await _counted(store, run_id, key, _held(counted, key), (start, end))


async def _counted(
    store: RowStore, run_id: str, key: str, held: list[tuple[int, int]], span: tuple[int, int]
) -> tuple[FactRecord, ...]:
    """`key_facts` from `held`, `(seq, facts of key)` of each entry: facts `start` to `end`.

    Raises:
        StoreError: An entry read is missing or invalid, or does not hold what `held` says.
    """
    start, end = span
    picked: list[object] = []
    position = 0  # of the first fact of `key` in the entry
    wanted = [(seq, n, position := position + n) for seq, n in held]
    needed = [(seq, n, after - n) for seq, n, after in wanted if after > start and after - n < end]
    if not needed:
        return ()
    first = needed[0][0]
    page = await store.journal(run_id, after=first - 1, limit=len(needed))
    if [seq for seq, _ in page] != [seq for seq, _, _ in needed]:
        missing = next((seq for seq, _, _ in needed if seq not in dict(page)), first)
        raise StoreError(f"run {run_id}: journal entry {missing} is missing")
    for (seq, text), (_, n, low) in zip(page, needed, strict=True):
        facts = _of_key(run_id, seq, text, key)
        if len(facts) != n:
            raise StoreError(
                f"run {run_id}: journal entry {seq} holds {len(facts)} facts of {visible(key)}; "
                f"the counts beside it say {n}"
            )
        picked += facts[max(start - low, 0) : end - low]
    return _checked(run_id, _FACTS, picked, "stored fact")


async def located(store: RowStore, head: RecordHead, key: str) -> list[tuple[int, int]] | None:
    """`(seq, facts of key)` of each of the run's entries, from the counts beside them.

    `None` when an entry has none (written before schema 8), or the head commits to none.

    Raises:
        StoreError: An entry is missing, a count is not `EntryCounts` JSON, or the counts
            are not those the head's `counts_digest` commits to (changed by hand).
    """
    counted = await entry_counts(store, head)
    return None if counted is None else _held(counted, key)


def _held(counted: list[tuple[int, EntryCounts]], key: str) -> list[tuple[int, int]]:
    """`(seq, facts of key)` of each entry, from its counts."""
    return [(seq, {k.value: n for k, n in counts.keys}.get(key, 0)) for seq, counts in counted]


async def entry_counts(store: RowStore, head: RecordHead) -> list[tuple[int, EntryCounts]] | None:
    """The counts beside each of the run's entries, checked against the head (see `located`)."""
    run_id = head.record.run_id
    rows = await store.entry_counts(run_id)
    if head.counts_digest is None or any(text is None for _, text in rows):
        return None
    for expected, (seq, _) in enumerate(rows, start=1):
        if seq != expected:
            raise StoreError(f"run {run_id}: journal entry {expected} is missing")
    if len(rows) < head.journal_length:
        raise StoreError(f"run {run_id}: journal entry {len(rows) + 1} is missing")
    digest = counts_genesis(run_id)
    parsed: list[tuple[int, EntryCounts]] = []
    for seq, text in rows:
        digest = chain(digest, str(text))
        try:
            parsed.append((seq, EntryCounts.model_validate_json(str(text), context=STORED)))
        except ValidationError:
            raise StoreError(
                f"run {run_id}: the counts of journal entry {seq} are invalid"
            ) from None
    if len(rows) != head.journal_length or digest != head.counts_digest:
        raise StoreError(
            f"run {run_id}: the counts beside its journal entries are not those its head "
            "commits to: one was changed by hand"
        )
    return parsed


async def _scanned(
    store: RowStore, head: RecordHead, key: str, span: tuple[int, int, int]
) -> tuple[FactRecord, ...]:
    """`key_facts` of a run whose entries have no counts: facts `start` to `end` of `total`.

    One entry at a time, from the end of the run nearer to them.
    """
    run_id = head.record.run_id
    start, end, total = span
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
    return _checked(run_id, _FACTS, picked, "stored fact")


async def facts_at(
    store: RowStore, head: RecordHead, cycle: int, shown: int
) -> tuple[int, tuple[FactRecord, ...]] | None:
    """How many facts the run's context held at the end of `cycle`, and the first `shown`.

    In the record's order (key order, then the run's). From the counts beside the entries:
    an entry saved after `cycle` or before holds only facts promoted by then, and one saved
    after the entry saved after `cycle` only facts promoted after it, so only the first
    entry saved after `cycle` is read whole (its facts promoted by `cycle` are kept), and the
    facts shown are read from the first entries (as `key_facts` reads them; the counts
    are read and checked once). `None` when an entry has no
    counts (written before schema 8).

    Raises:
        StoreError: An entry read is missing or invalid, or does not hold what its counts
            say, or the counts are not those the head commits to.
    """
    counted = await entry_counts(store, head)
    if counted is None:
        return None
    run_id = head.record.run_id
    before: dict[str, int] = {}
    later: dict[str, list[object]] = {}
    for seq, counts in counted:
        if counts.cycle > cycle:
            later = await _promoted_by(store, run_id, (seq, counts), cycle)
            break
        for key, n in counts.keys:
            before[key.value] = before.get(key.value, 0) + n
    total = sum(before.values()) + sum(len(facts) for facts in later.values())
    picked: list[FactRecord] = []
    for key, _ in head.keys:
        name = key.value
        wanted = min(before.get(name, 0), shown - len(picked))
        if wanted > 0:
            read = await _counted(store, run_id, name, _held(counted, name), (0, wanted))
            if len(read) != wanted:
                raise StoreError(f"run {run_id}: its rows hold fewer facts of {visible(name)}")
            picked += read
        rest = later.get(name, [])[: max(shown - len(picked), 0)]
        if rest:
            picked += _checked(run_id, _FACTS, rest, "stored fact")
    return total, tuple(picked)


async def _promoted_by(
    store: RowStore, run_id: str, counted: tuple[int, EntryCounts], cycle: int
) -> dict[str, list[object]]:
    """The facts of entry `seq` (with `counts`) promoted by `cycle`, by key, as parsed JSON.

    Raises:
        StoreError: The entry is missing or invalid, or does not hold what its counts say.
    """
    seq, counts = counted
    facts, _ = await _entry(store, run_id, seq)
    held: dict[str, list[object]] = {}
    kept: dict[str, list[object]] = {}
    for _, fact in facts:
        fields = cast("dict[str, object]", fact)
        name = str(fields.get("key"))
        held.setdefault(name, []).append(fact)
        promotion = cast("dict[str, object]", fields["promotion"])
        promoted = promotion.get("cycle")
        if not isinstance(promoted, int):
            raise StoreError(f"run {run_id}: journal entry {seq} is invalid")
        if promoted <= cycle:
            kept.setdefault(name, []).append(fact)
    if {name: len(facts) for name, facts in held.items()} != {
        key.value: n for key, n in counts.keys
    }:
        raise StoreError(
            f"run {run_id}: journal entry {seq} does not hold the facts the counts beside it say"
        )
    return kept
