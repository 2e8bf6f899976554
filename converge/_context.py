"""The `Context` protocol and `ContextSnapshot`, the immutable context.

A snapshot keeps, per key, one `FactSequence` (what `get` returns): the facts in insertion
order and a persistent hash map (`immutables.Map`, a HAMT) id → fact. The facts sit in full
chunks of 64 (tuples shared between snapshots, themselves in a persistent map by chunk
number) and a short tail, so a new snapshot shares everything it did not change with the old
one: taking one costs O(facts added + 64 + log n), and `find`, `has`, `count` and indexing
are O(1) (O(log₃₂ n)).

A snapshot also keeps, per key, the leaf digest the seal computed for each fact when it was
promoted (or restored), in persistent chunks. The Merkle root is built from those, never from
a digest read off a fact later, so a fact object changed below the public API (its
`__dict__` written with `object.__setattr__`, say, and its `digest` recomputed) changes
neither the root nor the proof, and `verify` finds it.
Chunks rather than a persistent vector, and one map rather than two: the garbage collector
walks a container each time a young-generation collection finds it new, so a new snapshot
should hold few new containers: a new tail, now and then a new full chunk (each walked once,
then old), and the map's new nodes. A C `PVector` is traversed element by element by every
young-generation collection (measured: 128 µs per collection at 10,000 facts).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Final, Protocol, TypeVar, cast, final, overload

import immutables

from ._canonical import merkle_root
from ._fact import Fact
from ._key import AnyKey, KeyLike, in_key_order, key_named

__all__ = ["Context", "ContextSnapshot"]


class Context(Protocol):
    """What a suggestor may read. Any class with these members qualifies."""

    def has(self, key: KeyLike, /) -> bool:
        """Whether any fact lives under `key`."""
        ...

    def get(self, key: KeyLike, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order."""
        ...

    def count(self, key: KeyLike, /) -> int:
        """How many facts live under `key`."""
        ...

    def find(self, key: KeyLike, id: str, /) -> Fact | None:
        """The fact with `id` under `key`, or `None`."""
        ...

    @property
    def version(self) -> int:
        """How many facts the context has gained over its whole history."""
        ...

    @property
    def cycle(self) -> int:
        """The cycle that produced this context."""
        ...


_EMPTY_IDS: Final[immutables.Map[str, Fact]] = immutables.Map()
_CHUNK: Final = 64
"""Facts and their leaf digests are kept in shared, full chunks of this many, and a short tail."""
_SHIFT: Final = 6  # _CHUNK == 1 << _SHIFT
_T = TypeVar("_T")
_Chunks = immutables.Map[int, tuple[_T, ...]]
"""Full chunks by their number: a persistent map, so a new chunk costs O(log n), not a copy."""


@final
class FactSequence(Sequence[Fact]):
    """The facts of one key in insertion order: immutable, O(1) indexing.

    It is also all the context keeps for the key: the facts in full chunks of `_CHUNK`
    (shared between snapshots) and a tail of fewer, the id → fact map, and the leaf digests
    the seal computed, chunked the same way. `ContextSnapshot.get` hands it out as is.
    """

    __slots__ = ("_chunks", "_full", "_ids", "_leaf_chunks", "_leaf_tail", "_length", "_tail")

    def __init__(
        self,
        ids: immutables.Map[str, Fact],
        chunks: _Chunks[Fact],
        tail: tuple[Fact, ...],
        leaf_chunks: _Chunks[str],
        leaf_tail: tuple[str, ...],
    ) -> None:
        self._ids = ids
        self._chunks = chunks
        self._tail = tail
        self._leaf_chunks = leaf_chunks
        self._leaf_tail = leaf_tail
        self._full = full = len(chunks) << _SHIFT
        self._length = full + len(tail)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Fact: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Fact, ...]: ...
    def __getitem__(self, index: int | slice) -> Fact | tuple[Fact, ...]:
        if isinstance(index, slice):
            return tuple([self[i] for i in range(*index.indices(self._length))])
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError(f"fact index {index} out of range for {length} facts")
        full = self._full
        if index >= full:
            return self._tail[index - full]
        return self._chunks[index >> _SHIFT][index & (_CHUNK - 1)]

    def __iter__(self) -> Iterator[Fact]:
        return chain(_chained(self._chunks), self._tail)

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

    def _extended(self, facts: Sequence[Fact], leaves: Sequence[str]) -> FactSequence:
        """These facts with `facts` (ids new to them) and their `leaves` appended."""
        if len(facts) == 1:
            ids = self._ids.set(facts[0].id, facts[0])
        else:
            mutation = self._ids.mutate()
            for fact in facts:
                mutation[fact.id] = fact
            ids = mutation.finish()
        tail = self._tail + tuple(facts)
        leaf_tail = self._leaf_tail + tuple(leaves)
        if len(tail) < _CHUNK:  # the usual case: no chunk fills up
            return FactSequence(ids, self._chunks, tail, self._leaf_chunks, leaf_tail)
        chunks, tail = _rechunk(self._chunks, tail)
        leaf_chunks, leaf_tail = _rechunk(self._leaf_chunks, leaf_tail)
        return FactSequence(ids, chunks, tail, leaf_chunks, leaf_tail)

    def _leaves(self) -> Iterator[str]:
        """The leaf digests, in insertion order."""
        return chain(_chained(self._leaf_chunks), self._leaf_tail)


def _rechunk(chunks: _Chunks[_T], tail: tuple[_T, ...]) -> tuple[_Chunks[_T], tuple[_T, ...]]:
    """`chunks` and `tail` with the tail's full chunks moved to the chunks."""
    if len(tail) < _CHUNK:
        return chunks, tail
    full = len(tail) - len(tail) % _CHUNK
    mutation = chunks.mutate()
    number = len(chunks)
    for start in range(0, full, _CHUNK):
        mutation[number] = tail[start : start + _CHUNK]
        number += 1
    return mutation.finish(), tail[full:]


def _chained(chunks: _Chunks[_T]) -> Iterator[_T]:
    """The items of `chunks`, in order."""
    return chain.from_iterable(map(chunks.__getitem__, range(len(chunks))))


_NO_FACTS: Final[_Chunks[Fact]] = immutables.Map()
_NO_LEAVES: Final[_Chunks[str]] = immutables.Map()
_EMPTY_FACTS: Final = FactSequence(_EMPTY_IDS, _NO_FACTS, (), _NO_LEAVES, ())


@final
class ContextSnapshot:
    """An immutable view of every fact, shared by all suggestors of a cycle.

    Build an empty one with [`empty`][converge.ContextSnapshot.empty]; the engine derives every
    other. A snapshot from one run may start the next (`engine.run(context=...)`).
    """

    __slots__ = ("__weakref__", "_clock", "_cycle", "_root", "_size", "_stores", "_version")

    _stores: dict[AnyKey, FactSequence]
    _version: int
    _cycle: int
    _clock: int
    _root: str | None
    _size: int

    def __init__(self) -> None:
        raise TypeError("use ContextSnapshot.empty(); the engine derives every other snapshot")

    @classmethod
    def _make(
        cls,
        stores: dict[AnyKey, FactSequence],
        version: int,
        cycle: int,
        clock: int,
        size: int = 0,
    ) -> ContextSnapshot:
        snapshot = object.__new__(cls)
        # the slots written through their descriptors: half the cost of object.__setattr__
        _set_size(snapshot, size)
        _set_stores(snapshot, stores)
        _set_version(snapshot, version)
        _set_cycle(snapshot, cycle)
        _set_clock(snapshot, clock)
        _set_root(snapshot, None)
        return snapshot

    @classmethod
    def empty(cls) -> ContextSnapshot:
        """A context with no facts, at cycle 0."""
        return cls._make({}, 0, 0, 0)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ContextSnapshot is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ContextSnapshot is immutable; cannot delete {name!r}")

    def __copy__(self) -> ContextSnapshot:
        return self

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> ContextSnapshot:
        return self

    # -- the Context protocol -------------------------------------------------------------

    def has(self, key: KeyLike, /) -> bool:
        """Whether any fact lives under `key` (a name no key has raises `ValueError`)."""
        if key in self._stores:
            return True
        _known(key)
        return False

    def get(self, key: KeyLike, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order (a persistent vector; O(1)).

        Raises:
            ValueError: `key` is a name that no built-in or declared key has.
        """
        store = self._stores.get(key)  # pyright: ignore[reportArgumentType]  # a name finds its key
        if store is None:
            _known(key)
            return _EMPTY_FACTS
        return store

    def count(self, key: KeyLike, /) -> int:
        """How many facts live under `key` (a name no key has raises `ValueError`)."""
        store = self._stores.get(key)  # pyright: ignore[reportArgumentType]  # a name finds its key
        if store is None:
            _known(key)
            return 0
        return store._length  # pyright: ignore[reportPrivateUsage]

    def find(self, key: KeyLike, id: str, /) -> Fact | None:
        """The fact with `id` under `key`, or `None` (a name no key has raises `ValueError`)."""
        store = self._stores.get(key)  # pyright: ignore[reportArgumentType]  # a name finds its key
        if store is None:
            _known(key)
            return None
        return store._ids.get(id)  # pyright: ignore[reportPrivateUsage]

    @property
    def version(self) -> int:
        """How many facts the context has gained over its whole history."""
        return self._version

    @property
    def cycle(self) -> int:
        """The cycle that produced this snapshot (0 for the inputs or an empty context)."""
        return self._cycle

    # -- beyond the protocol ----------------------------------------------------------------

    @property
    def clock(self) -> int:
        """The Lamport clock after the last promoted fact."""
        return self._clock

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Fact]:
        return iter(self.facts())

    def __repr__(self) -> str:
        counts = ", ".join(f"{key.value}={len(self._stores[key])}" for key in self.keys())
        return f"ContextSnapshot(cycle={self._cycle}, version={self._version}, {counts or 'empty'})"

    def keys(self) -> tuple[AnyKey, ...]:
        """The keys that hold facts, in key order."""
        return in_key_order(self._stores)

    def facts(self) -> tuple[Fact, ...]:
        """Every fact, in key order, then insertion order."""
        return tuple(fact for key in self.keys() for fact in self._stores[key])

    def merkle_root(self) -> str:
        """The hex Merkle root over the facts' leaves, in `facts()` order; computed once.

        The leaves are the digests the engine computed when it promoted (or restored) each
        fact, kept by the context, not the `digest` a fact object carries now.
        """
        root = self._root
        if root is None:
            stores = self._stores
            leaves = chain.from_iterable(
                stores[key]._leaves()  # pyright: ignore[reportPrivateUsage]
                for key in self.keys()
            )
            root = merkle_root(map(bytes.fromhex, leaves))
            _set_root(self, root)
        return root

    def _sealed(self) -> Iterator[tuple[Fact, str]]:
        """Every fact with the leaf digest the engine kept for it, in `facts()` order."""
        stores = self._stores
        for key in self.keys():
            store = stores[key]
            leaves = store._leaves()  # pyright: ignore[reportPrivateUsage]
            yield from zip(store, leaves, strict=True)

    # -- kernel use --------------------------------------------------------------------------

    def _at_cycle(self, cycle: int) -> ContextSnapshot:
        if cycle == self._cycle:
            return self
        return ContextSnapshot._make(self._stores, self._version, cycle, self._clock, self._size)

    def _extend(
        self, facts: Sequence[Fact], leaves: Sequence[str], cycle: int, clock: int
    ) -> ContextSnapshot:
        """A new snapshot with `facts` appended (ids must be new); shares everything else.

        `leaves` are the facts' digests as the seal computed them, in the same order.
        """
        if len(leaves) != len(facts):
            raise ValueError(f"{len(facts)} facts but {len(leaves)} leaf digests")
        if not facts:
            return self._at_cycle(cycle)
        stores = dict(self._stores)
        for key, new, new_leaves in _by_key(facts, leaves):
            facts_of = stores.get(key, _EMPTY_FACTS)
            stores[key] = facts_of._extended(new, new_leaves)  # pyright: ignore[reportPrivateUsage]
        if len(stores) != len(self._stores):
            stores = {key: stores[key] for key in in_key_order(stores)}
        added = len(facts)
        return ContextSnapshot._make(
            stores, self._version + added, cycle, clock, self._size + added
        )


_slots = ContextSnapshot.__dict__
_set_size = _slots["_size"].__set__
_set_stores = _slots["_stores"].__set__
_set_version = _slots["_version"].__set__
_set_cycle = _slots["_cycle"].__set__
_set_clock = _slots["_clock"].__set__
_set_root = _slots["_root"].__set__


def _known(key: KeyLike) -> None:
    """Raise `ValueError` when `key` is a plain name that no key has (a typo, say)."""
    if type(key) is str:
        key_named(key)


def _by_key(
    facts: Sequence[Fact], leaves: Sequence[str]
) -> Sequence[tuple[AnyKey, Sequence[Fact], Sequence[str]]]:
    """The facts and their leaves grouped by key, in order (one key, the usual case, as is)."""
    first = facts[0].key
    for fact in facts:
        if fact.key is not first:
            break
    else:
        return ((first, facts, leaves),)
    grouped: dict[AnyKey, tuple[list[Fact], list[str]]] = {}
    for fact, leaf in zip(facts, leaves, strict=True):
        group = grouped.get(fact.key)
        if group is None:
            grouped[fact.key] = ([fact], [leaf])
        else:
            group[0].append(fact)
            group[1].append(leaf)
    return [(key, group[0], group[1]) for key, group in grouped.items()]
