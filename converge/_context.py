"""The `Context` protocol and `ContextSnapshot`, the immutable context.

A snapshot keeps, per key, one `FactSequence` (what `get` returns): its view of the key's
facts in insertion order, the id → position and id → fact maps and the leaf digest the
seal computed for each fact when it was promoted (or restored), all shared with the other
snapshots of its line of history (`_sequence`). Taking a new snapshot costs O(facts added +
keys); `find`, `has`, `count` and indexing are O(1).

Every key known when a line of snapshots begins (`empty`: the built-in keys and those
declared so far) has a store from the start, empty (`EMPTY_FACTS`) until its first fact; a
key declared later has one from its first fact on. The readers index the stores
(`stores[key]`) and catch the `KeyError` of a key declared after the line began and still
without facts, or of a name no key has: on W1's `accepts` calls, about 5 ns less a `find`
than `stores.get(key)` (a specialised subscript against a method call). The `KeyError` costs
about 0.3 µs, which is why the keys declared so far are there from the start: keys are
declared when their modules are imported, before any run.

The Merkle root is built from the kept leaves, never from a digest read off a fact later, so
a fact object changed below the public API (its `__dict__` written with
`object.__setattr__`, say, and its `digest` recomputed) changes neither the root nor the
proof, and `verify` finds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Protocol, final

from ._canonical import merkle_root
from ._fact import Fact
from ._key import AnyKey, KeyLike, in_key_order, key_named, known_keys
from ._sequence import EMPTY_FACTS, FactSequence

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


@final
class ContextSnapshot:
    """An immutable view of every fact, shared by all suggestors of a cycle.

    Build an empty one with [`empty`][converge.ContextSnapshot.empty]; the engine derives every
    other. A snapshot from one run may start the next (`engine.run(context=...)`).
    """

    __slots__ = ("__weakref__", "_clock", "_cycle", "_root", "_size", "_stores")

    _stores: dict[AnyKey, FactSequence]
    _cycle: int
    _clock: int
    _root: str
    """The Merkle root, set when first computed (`merkle_root`)."""
    _size: int
    """How many facts: as many as the context ever gained (a fact is never removed)."""

    def __init__(self) -> None:
        raise TypeError("use ContextSnapshot.empty(); the engine derives every other snapshot")

    @classmethod
    def _make(
        cls,
        stores: dict[AnyKey, FactSequence],
        cycle: int,
        clock: int,
        size: int = 0,
    ) -> ContextSnapshot:
        snapshot = object.__new__(cls)
        # the slots written through their descriptors: half the cost of object.__setattr__
        # (`_root` is left unset until the root is computed)
        _set_size(snapshot, size)
        _set_stores(snapshot, stores)
        _set_cycle(snapshot, cycle)
        _set_clock(snapshot, clock)
        return snapshot

    @classmethod
    def empty(cls) -> ContextSnapshot:
        """A context with no facts, at cycle 0."""
        return cls._make(dict.fromkeys(known_keys(), EMPTY_FACTS), 0, 0)

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
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return False
        return store._length != 0  # pyright: ignore[reportPrivateUsage]

    def get(self, key: KeyLike, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order (a view, nothing copied; O(1)).

        Raises:
            ValueError: `key` is a name that no built-in or declared key has.
        """
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return EMPTY_FACTS
        return store

    def count(self, key: KeyLike, /) -> int:
        """How many facts live under `key` (a name no key has raises `ValueError`)."""
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return 0
        return store._length  # pyright: ignore[reportPrivateUsage]

    def find(self, key: KeyLike, id: str, /) -> Fact | None:
        """The fact with `id` under `key`, or `None` (a name no key has raises `ValueError`)."""
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return None
        # FactSequence.find, inlined: suggestors call it in every accepts
        fact = store._by_id.get(id)  # pyright: ignore[reportPrivateUsage]
        if fact is None or store._newest:  # pyright: ignore[reportPrivateUsage]
            return fact
        # an older snapshot of its line: the id may have been added after it
        if store._positions[id] < store._length:  # pyright: ignore[reportPrivateUsage]
            return fact
        return None

    @property
    def version(self) -> int:
        """How many facts the context has gained over its whole history."""
        return self._size

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
        return f"ContextSnapshot(cycle={self._cycle}, version={self._size}, {counts or 'empty'})"

    def keys(self) -> tuple[AnyKey, ...]:
        """The keys that hold facts, in key order."""
        return tuple([key for key, store in self._stores.items() if store._length])  # pyright: ignore[reportPrivateUsage]

    def facts(self) -> tuple[Fact, ...]:
        """Every fact, in key order, then insertion order."""
        return tuple(fact for key in self.keys() for fact in self._stores[key])

    def merkle_root(self) -> str:
        """The hex Merkle root over the facts' leaves, in `facts()` order; computed once.

        The leaves are the digests the engine computed when it promoted (or restored) each
        fact, kept by the context, not the `digest` a fact object carries now.
        """
        try:
            return self._root
        except AttributeError:  # not computed yet
            stores = self._stores
            leaves = chain.from_iterable(stores[key].leaves() for key in self.keys())
            root = merkle_root(leaves)
            _set_root(self, root)
            return root

    def _sealed(self) -> Iterator[tuple[Fact, bytes]]:
        """Every fact with the leaf digest the engine kept for it, in `facts()` order."""
        stores = self._stores
        for key in self.keys():
            store = stores[key]
            leaves = store.leaves()
            yield from zip(store, leaves, strict=True)

    # -- kernel use --------------------------------------------------------------------------

    def _at_cycle(self, cycle: int) -> ContextSnapshot:
        if cycle == self._cycle:
            return self
        return ContextSnapshot._make(self._stores, cycle, self._clock, self._size)

    def _extend(
        self, facts: Sequence[Fact], leaves: Sequence[bytes], cycle: int, clock: int
    ) -> ContextSnapshot:
        """A new snapshot with `facts` appended (ids must be new); shares everything else.

        `leaves` are the facts' digests as the seal computed them, in the same order.
        """
        if len(leaves) != len(facts):
            raise ValueError(f"{len(facts)} facts but {len(leaves)} leaf digests")
        if not facts:
            return self._at_cycle(cycle)
        stores = dict(self._stores)
        if len(facts) == 1:  # most cycles: no grouping to do
            key = facts[0].key
            stores[key] = stores.get(key, EMPTY_FACTS).extended(facts, leaves)
        else:
            for key, new, new_leaves in _by_key(facts, leaves):
                stores[key] = stores.get(key, EMPTY_FACTS).extended(new, new_leaves)
        if len(stores) != len(self._stores):
            stores = {key: stores[key] for key in in_key_order(stores)}
        return ContextSnapshot._make(stores, cycle, clock, self._size + len(facts))


_slots = ContextSnapshot.__dict__
_set_size = _slots["_size"].__set__
_set_stores = _slots["_stores"].__set__
_set_cycle = _slots["_cycle"].__set__
_set_clock = _slots["_clock"].__set__
_set_root = _slots["_root"].__set__


def _known(key: KeyLike) -> None:
    """Raise `ValueError` when `key` is a plain name that no key has (a typo, say)."""
    if type(key) is str:
        key_named(key)


def _by_key(
    facts: Sequence[Fact], leaves: Sequence[bytes]
) -> Sequence[tuple[AnyKey, Sequence[Fact], Sequence[bytes]]]:
    """The facts and their leaves grouped by key, in order (one key, the usual case, as is)."""
    first = facts[0].key
    for fact in facts:
        if fact.key is not first:
            break
    else:
        return ((first, facts, leaves),)
    grouped: dict[AnyKey, tuple[list[Fact], list[bytes]]] = {}
    for fact, leaf in zip(facts, leaves, strict=True):
        group = grouped.get(fact.key)
        if group is None:
            grouped[fact.key] = ([fact], [leaf])
        else:
            group[0].append(fact)
            group[1].append(leaf)
    return [(key, group[0], group[1]) for key, group in grouped.items()]
