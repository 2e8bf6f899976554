"""`FactSequence`: the facts of one key as one snapshot sees them, sharing one history.

Every snapshot of one line of history shares, per key, one append-only store: the facts
in insertion order, the leaf digest the seal computed for each, an id → position map and an
id → fact map. A `FactSequence` is a prefix of that store: its first `length` entries. A
fact at a position past the prefix was added after this snapshot and is invisible to it, so
an older snapshot never changes.

Extending the sequence that ends where its store ends (the newest of its line) appends to
the store in place: O(facts added). Extending any other (an older snapshot a second run
starts from, a merge rolled back) copies its prefix into a new store first, once, and its
own line goes on from there: two list slices and two dict copies at C speed (about 0.1 ms
per 10,000 facts each), less the ids added after it.

`find` on the newest sequence of its line is one dict lookup (id → fact) and one flag: every
id in the store is its own. An older sequence, one its line has grown past, checks the
id's position against its length as well. Appending in place clears the older sequence's
flag first, and `find` reads the flag after its lookup, so a reader that finds an id
appended after its snapshot always sees the flag cleared. Against a position lookup, a
comparison and a list index on every snapshot, measured on W1's `accepts` calls (two
`find`s each): about 6 ns less a `find` on the newest snapshot, about 25 ns more on an
older one (which a run's suggestors never read: a cycle's snapshot is the newest until the
cycle merges), for a second dict of the ids (about 20 bytes a fact).

Extensions hold one lock, so two threads extending the same snapshot cannot both append;
reads take none (a store only grows, and a reader looks only below its own length).

Against a persistent hash map (`immutables.Map`) and chunked tuples, measured on W3: the
map's path copies were the largest single cost of adding a fact, and every snapshot made
new map nodes for the garbage collector to walk. The price: an older snapshot keeps its
store alive, with the facts later snapshots of its line added to it, for as long as it
lives.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Final, cast, final, overload

from ._fact import Fact

__all__ = ["EMPTY_FACTS", "FactSequence"]

_extending: Final = threading.Lock()
"""Held while a store is appended to or copied: one extension at a time, whatever the thread."""


@final
class FactSequence(Sequence[Fact]):
    """The facts of one key in insertion order: immutable, O(1) indexing and `find`.

    It is also all the context keeps for the key: the facts, the leaf digests the seal
    computed, the id → position and id → fact maps, all shared with the other snapshots of
    its line. `ContextSnapshot.get` hands it out as is.
    """

    __slots__ = ("_by_id", "_facts", "_leaves", "_length", "_newest", "_positions")

    def __init__(
        self,
        facts: list[Fact],
        leaves: list[bytes],
        positions: dict[str, int],
        by_id: dict[str, Fact],
        length: int,
    ) -> None:
        self._facts = facts
        self._leaves = leaves
        self._positions = positions
        self._by_id = by_id
        """The store's facts by id: this sequence's own while `_newest`."""
        self._length = length
        self._newest = True
        """Nothing was appended to the store after this sequence's facts (`extended` clears
        it before it appends): every id in `_by_id` is this sequence's own. It says what
        `len(_facts) == _length` says, kept as a flag because `find` reads it on every call
        (the comparison would cost about what the flag saves), and cleared before the ids
        are added, where the list's length grows only after them."""

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Fact: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Fact, ...]: ...
    def __getitem__(self, index: int | slice) -> Fact | tuple[Fact, ...]:
        if isinstance(index, slice):
            return tuple(map(self._facts.__getitem__, range(*index.indices(self._length))))
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError(f"fact index {index} out of range for {length} facts")
        return self._facts[index]

    def __iter__(self) -> Iterator[Fact]:
        return islice(self._facts, self._length)

    def __repr__(self) -> str:
        return f"FactSequence({[fact.ref for fact in self]!r})"

    def __eq__(self, other: object) -> bool:
        """Equal to another sequence of facts holding equal facts in the same order."""
        if isinstance(other, FactSequence):
            return self._length == other._length and tuple(self) == tuple(other)
        if isinstance(other, tuple | list):
            return tuple(self) == tuple(cast("Sequence[object]", other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def find(self, ident: str) -> Fact | None:
        """The fact with id `ident`, or `None`."""
        fact = self._by_id.get(ident)
        if fact is None or self._newest:  # the flag after the lookup: see the module's notes
            return fact
        return fact if self._positions[ident] < self._length else None

    def leaves(self) -> Iterator[bytes]:
        """The leaf digests, in insertion order."""
        return islice(self._leaves, self._length)

    def extended(self, facts: Sequence[Fact], leaves: Sequence[bytes]) -> FactSequence:
        """These facts with `facts` (ids new to them) and their `leaves` appended."""
        length = self._length
        _extending.acquire()  # not `with`: about 0.1 µs less per cycle
        try:
            mine = self._facts
            if length and len(mine) == length:  # the newest of its line: append in place
                self._newest = False  # before the ids are added: `find` reads it after
                positions = self._positions
                by_id = self._by_id
                all_leaves = self._leaves
            else:  # an older snapshot (or none): its own line starts here
                later = mine[length:]
                mine = mine[:length]
                all_leaves = self._leaves[:length]
                positions = self._positions.copy()  # at C speed; then drop the later ids
                by_id = self._by_id.copy()
                for fact in later:
                    positions.pop(fact.id, None)
                    by_id.pop(fact.id, None)
            for at, fact in enumerate(facts, length):
                ident = fact.id
                positions[ident] = at
                by_id[ident] = fact
            mine.extend(facts)
            all_leaves.extend(leaves)
        finally:
            _extending.release()
        return FactSequence(mine, all_leaves, positions, by_id, length + len(facts))


EMPTY_FACTS: Final = FactSequence([], [], {}, {}, 0)
"""No facts: extending it always starts a new line (`length` 0 never appends in place)."""
