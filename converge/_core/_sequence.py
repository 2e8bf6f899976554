"""One line of history's facts, kept per key (`FactStore`), and one snapshot's view of a key.

Every snapshot of one line of history shares one dict of stores, one per key, append-only:
the facts in insertion order, the leaf digest the seal computed for each, an id → fact map
and an id → position map. A fact's position is its place in the whole line (the size of the
snapshot it was added to), so a snapshot of `size` facts sees exactly the facts whose
position is below `size`, under every key at once.

The newest snapshot of its line (nothing was added after it) sees every fact its stores
hold: `find` is one dict lookup and one flag, the snapshot's own. An older one checks the
fact's position against its size as well. Adding facts to the newest snapshot appends them
to the stores in place and hands the line on to the new snapshot: O(facts added), no store
or dict of stores copied, the older snapshot's flag cleared before the first fact is added
(its readers read the flag after what they read from a store, so one that finds a fact
added after its snapshot always sees the flag cleared). Adding to any other snapshot (a
second run started from an older one, a merge rolled back) copies what it sees of every
store into a line of its own first, once: list slices and dict copies at C speed.

Against a store per key per snapshot (the design before), measured on W1: about 1 µs less a
cycle, the new sequence and the copied dict of stores it saved. Against a persistent hash
map (`immutables.Map`), measured on W3: the map's path copies were the largest single cost
of adding a fact. The price: an older snapshot keeps its stores alive, with the facts later
snapshots of its line added to them, for as long as it lives.

Without the GIL (the free-threaded build), the snapshot stays correct by these rules alone:

- Writers: lines are extended and copied under one lock (`EXTENDING`), so two threads
  extending one snapshot cannot both append. A writer clears the extended snapshot's flag,
  then, per fact, writes its position (`positions`), then `by_id`, then appends it to
  `facts` and `leaves`.
- Readers take no lock and decide by what was published before the fact itself: CPython
  stores a dict's values with release semantics and reads them with acquire semantics on
  that build, so a reader that finds a fact in `by_id` also sees the flag cleared and the
  fact's position. `find` looks the id up first and reads the flag after it.
- Counts and views (`visible`) read the store's `tail`, never a list's length: a list's
  length is stored without ordering, so a reader may see a longer `facts` before anything
  else of the append. `tail` is one tuple, how many facts the store holds and the position
  of the last, written after the fact's append (an attribute is stored with release
  semantics on that build, read with acquire semantics): the count and the position agree,
  and every fact it counts is in `facts`. A snapshot whose size is above the position
  sees them all; a fact under a snapshot's size was appended before that snapshot existed.

`tests/converge/test_sequence.py` runs readers and writers in threads against one line.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Final, cast, final, overload

from ._fact import Fact

__all__ = ["EMPTY_FACTS", "EMPTY_STORE", "EXTENDING", "FactSequence", "FactStore"]

EXTENDING: Final = threading.Lock()
"""Held while a line is appended to or copied: one extension at a time, whatever the thread."""


@final
class FactStore:
    """The facts of one key on one line of history, append-only, shared by its snapshots."""

    __slots__ = ("by_id", "facts", "leaves", "positions", "tail", "view")

    def __init__(
        self,
        facts: list[Fact],
        leaves: list[bytes],
        positions: dict[str, int],
        by_id: dict[str, Fact],
    ) -> None:
        self.facts = facts
        self.leaves = leaves
        """Each fact's leaf digest, as the seal computed it."""
        self.positions = positions
        """Each fact's position on the line, by id (set before `by_id`: see the notes)."""
        self.by_id = by_id
        self.view: FactSequence | None = None
        """The last view handed out (`sequence`), kept while the store holds as many."""
        self.tail: tuple[int, int] = (len(facts), max(positions.values(), default=-1))
        """How many facts the store holds, and the last one's position: one read for both
        (see the notes, "Without the GIL"), which a snapshot's count compares with its size."""

    def ident(self, fact: Fact) -> str:
        """The id `fact` (an object of this store) was added with, whatever it says now."""
        for ident, kept in self.by_id.items():
            if kept is fact:
                return ident
        raise LookupError("the fact is not one of this store's")

    def visible(self, size: int) -> int:
        """How many of the facts a snapshot of `size` facts sees (those below `size`)."""
        length, last = self.tail  # once: another thread may append meanwhile
        if last < size:
            return length
        positions = self.positions
        return bisect_left(self.facts, size, 0, length, key=lambda fact: positions[fact.id])

    def sequence(self, length: int) -> FactSequence:
        """The view of the first `length` facts (the one kept, if it holds as many)."""
        view = self.view
        if view is not None and len(view) == length:
            return view
        view = self.view = FactSequence(self, length)
        return view

    def prefix(self, size: int) -> FactStore:
        """A store of its own with the facts a snapshot of `size` facts sees."""
        length = self.visible(size)
        if not length:
            return EMPTY_STORE
        facts = self.facts
        positions = self.positions.copy()  # at C speed; then drop the later ids
        by_id = self.by_id.copy()
        for fact in facts[length:]:
            del positions[fact.id], by_id[fact.id]
        return FactStore(facts[:length], self.leaves[:length], positions, by_id)

    def add(self, fact: Fact, leaf: bytes, position: int) -> None:
        """Add one `fact` (an id new to the store) with its `leaf`, at `position`.

        The caller holds `EXTENDING` and has cleared the extended snapshot's flag.
        """
        ident = fact.id
        self.positions[ident] = position  # before `by_id`: a reader that finds it finds this
        self.by_id[ident] = fact
        self.facts.append(fact)
        self.leaves.append(leaf)
        self.tail = (len(self.facts), position)  # last: what it counts is there

    def append(self, facts: Sequence[Fact], leaves: Sequence[bytes], position: int) -> None:
        """Add `facts` (ids new to the store) with their `leaves`, at `position` on.

        The caller holds `EXTENDING` and has cleared the extended snapshot's flag.
        """
        add = self.add
        for fact, leaf in zip(facts, leaves, strict=True):
            add(fact, leaf, position)
            position += 1


@final
class FactSequence(Sequence[Fact]):
    """The facts of one key as one snapshot sees them, in insertion order: immutable, a view
    of the first facts of its store (nothing copied), O(1) indexing and `find`."""

    __slots__ = ("_length", "_store")

    def __init__(self, store: FactStore, length: int) -> None:
        self._store = store
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Fact: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Fact, ...]: ...
    def __getitem__(self, index: int | slice) -> Fact | tuple[Fact, ...]:
        facts = self._store.facts
        if isinstance(index, slice):
            return tuple(map(facts.__getitem__, range(*index.indices(self._length))))
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError(f"fact index {index} out of range for {length} facts")
        return facts[index]

    def __iter__(self) -> Iterator[Fact]:
        return islice(self._store.facts, self._length)

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
        store = self._store
        fact = store.by_id.get(ident)
        if fact is None or not self._length:
            return None
        last = store.facts[self._length - 1]
        return fact if store.positions[ident] <= store.positions[last.id] else None

    def leaves(self) -> Iterator[bytes]:
        """The leaf digests, in insertion order."""
        return islice(self._store.leaves, self._length)


EMPTY_STORE: Final = FactStore([], [], {}, {})
"""No facts, shared by every line for its keys without any: never appended to (a line gives
a key its own store with its first fact)."""
EMPTY_FACTS: Final = FactSequence(EMPTY_STORE, 0)
"""The view of no facts."""
EMPTY_STORE.view = EMPTY_FACTS
