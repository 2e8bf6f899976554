"""`diff_runs`: where two stored runs part, and how their facts differ, key by key.

Each run's context at the end of cycle `c` is its facts promoted in a cycle up to `c` (as a
fork is built), so the first cycle whose contexts differ is found by comparing what each
cycle added, one cycle at a time; the roots are then computed at that cycle only. The
facts are compared by `(key, id)`: only in A, only in B, or in both with a different
content, payload or provenance. A `limit` bounds what is kept of each list; the counts are
always whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal, final

from pydantic import Field

from ._core._checkpoint import FactRecord
from ._core._key import AnyKey, KeyField, key_rank
from ._core._model import FrozenModel
from ._core._record import RunRecord
from ._core._stop import StopReason
from ._kernel._fork import records_root

__all__ = ["FactChange", "FactSide", "KeyDiff", "RunDiff", "diff_runs"]

DEFAULT_LIMIT: Final = 1000
"""How many facts of each list a diff keeps by default (the counts are always whole)."""


@final
class FactSide(FrozenModel, frozen=True):
    """A fact as one run has it, for a diff."""

    id: str
    """The fact's id."""
    content: str
    """Its content."""
    payload_digest: str
    """Its leaf digest (content, payload, provenance and the rest, hashed)."""
    provenance: str
    """Who claimed it."""
    suggestor: str
    """The suggestor that proposed it (`"input"`, `"human"`)."""
    cycle: int
    """The cycle that promoted it."""

    @classmethod
    def of(cls, fact: FactRecord) -> FactSide:
        """The side of a stored fact."""
        return cls(
            id=fact.id,
            content=fact.content,
            payload_digest=fact.digest,
            provenance=fact.provenance,
            suggestor=fact.promotion.suggestor,
            cycle=fact.promotion.cycle,
        )


@final
class FactChange(FrozenModel, frozen=True):
    """A fact both runs have under the same key and id, with something different."""

    id: str
    """The fact's id."""
    fields: tuple[Literal["content", "payload", "provenance"], ...]
    """What differs."""
    a: FactSide
    """As run A has it."""
    b: FactSide
    """As run B has it."""


@final
class KeyDiff(FrozenModel, frozen=True):
    """How two runs' facts differ under one key."""

    key: KeyField
    """The key."""
    only_a: tuple[FactSide, ...] = ()
    """Facts only run A has (at most the diff's limit)."""
    only_b: tuple[FactSide, ...] = ()
    """Facts only run B has (at most the diff's limit)."""
    changed: tuple[FactChange, ...] = ()
    """Facts both have, different (at most the diff's limit)."""
    only_a_count: int = Field(default=0, ge=0)
    """How many facts only run A has."""
    only_b_count: int = Field(default=0, ge=0)
    """How many facts only run B has."""
    changed_count: int = Field(default=0, ge=0)
    """How many facts both have, different."""


@final
class RunDiff(FrozenModel, frozen=True):
    """Where two runs part, how their facts differ, and how each stopped."""

    run_a: str
    """Run A's id."""
    run_b: str
    """Run B's id."""
    same: bool
    """Whether both end with the same Merkle root."""
    first_difference: int | None
    """The first cycle at whose end their contexts differ (0: the inputs); `None` when they
    never do, up to the last cycle of either."""
    root_a: str | None = None
    """Run A's root at `first_difference`."""
    root_b: str | None = None
    """Run B's root at `first_difference`."""
    stop_a: StopReason | None
    """How run A stopped (`None`: it has not)."""
    stop_b: StopReason | None
    """How run B stopped."""
    detail_a: str
    """Run A's stop detail."""
    detail_b: str
    """Run B's stop detail."""
    keys: tuple[KeyDiff, ...]
    """Each key with a difference, in key order."""


def diff_runs(
    a: RunRecord, b: RunRecord, *, key: AnyKey | None = None, limit: int = DEFAULT_LIMIT
) -> RunDiff:
    """Compare run `a` with run `b`: the first cycle they part, then their facts per key
    (only `key`'s, when given), each list at most `limit` long.

    The records are taken as they are: check their signatures and facts first (`converge
    diff` does).
    """
    first = _first_difference(a.facts, b.facts, max(a.cycles, b.cycles))
    roots: tuple[str | None, str | None] = (None, None)
    if first is not None:
        roots = (_root_at(a.facts, first), _root_at(b.facts, first))
    keys = _key_diffs(a.facts, b.facts, key, limit)
    return RunDiff(
        run_a=a.run_id,
        run_b=b.run_id,
        same=a.integrity.merkle_root == b.integrity.merkle_root,
        first_difference=first,
        root_a=roots[0],
        root_b=roots[1],
        stop_a=a.stop_reason,
        stop_b=b.stop_reason,
        detail_a=a.detail,
        detail_b=b.detail,
        keys=keys,
    )


def _by_cycle(facts: Iterable[FactRecord]) -> dict[int, list[tuple[int, str, str, str]]]:
    """Each cycle's facts as `(clock, key, id, digest)`, in merge (clock) order."""
    cycles: dict[int, list[tuple[int, str, str, str]]] = {}
    for fact in facts:
        promotion = fact.promotion
        cycles.setdefault(promotion.cycle, []).append(
            (promotion.clock, str(fact.key), fact.id, fact.digest)
        )
    for added in cycles.values():
        added.sort()
    return cycles


def _first_difference(a: Sequence[FactRecord], b: Sequence[FactRecord], last: int) -> int | None:
    """The first cycle whose contexts differ: what each cycle added, in merge order, is
    compared cycle by cycle (a key's facts are in merge order, so equal additions up to a
    cycle give equal contexts, and equal roots, there)."""
    in_a, in_b = _by_cycle(a), _by_cycle(b)
    for cycle in sorted({*in_a, *in_b, *range(last + 1)}):
        added_a = [entry[1:] for entry in in_a.get(cycle, ())]
        added_b = [entry[1:] for entry in in_b.get(cycle, ())]
        if added_a != added_b:
            return cycle
    return None


def _root_at(facts: Sequence[FactRecord], cycle: int) -> str:
    return records_root(fact for fact in facts if fact.promotion.cycle <= cycle)


def _key_diffs(
    a: Sequence[FactRecord], b: Sequence[FactRecord], key: AnyKey | None, limit: int
) -> tuple[KeyDiff, ...]:
    grouped_a = _grouped(a, key)
    grouped_b = _grouped(b, key)
    found: list[KeyDiff] = []
    for each in sorted({*grouped_a, *grouped_b}, key=key_rank):
        facts_a = grouped_a.get(each, {})
        facts_b = grouped_b.get(each, {})
        only_a = [f for i, f in facts_a.items() if i not in facts_b]
        only_b = [f for i, f in facts_b.items() if i not in facts_a]
        changed: list[tuple[FactRecord, FactRecord]] = [
            (fact_a, fact_b)
            for ident, fact_a in facts_a.items()
            if (fact_b := facts_b.get(ident)) is not None
            and fact_b.digest != fact_a.digest
            and _changed_fields(fact_a, fact_b)
        ]
        if only_a or only_b or changed:
            found.append(
                KeyDiff(
                    key=each,
                    only_a=tuple(FactSide.of(fact) for fact in only_a[:limit]),
                    only_b=tuple(FactSide.of(fact) for fact in only_b[:limit]),
                    changed=tuple(_change(a, b) for a, b in changed[:limit]),
                    only_a_count=len(only_a),
                    only_b_count=len(only_b),
                    changed_count=len(changed),
                )
            )
    return tuple(found)


def _change(a: FactRecord, b: FactRecord) -> FactChange:
    return FactChange(id=a.id, fields=_changed_fields(a, b), a=FactSide.of(a), b=FactSide.of(b))


def _grouped(
    facts: Sequence[FactRecord], key: AnyKey | None
) -> dict[AnyKey, dict[str, FactRecord]]:
    grouped: dict[AnyKey, dict[str, FactRecord]] = {}
    for fact in facts:
        if key is None or fact.key == key:
            grouped.setdefault(fact.key, {})[fact.id] = fact
    return grouped


def _changed_fields(
    a: FactRecord, b: FactRecord
) -> tuple[Literal["content", "payload", "provenance"], ...]:
    fields: list[Literal["content", "payload", "provenance"]] = []
    if a.content != b.content:
        fields.append("content")
    if a.payload != b.payload:
        fields.append("payload")
    if a.provenance != b.provenance:
        fields.append("provenance")
    return tuple(fields)
