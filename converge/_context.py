"""The `Context` protocol and `ContextSnapshot`, the immutable context.

A snapshot keeps, per key, a persistent vector of facts in insertion order and a persistent
hash map from id to fact. A new snapshot shares everything it did not change with the old
one, so taking one costs O(facts added), and `find`, `has` and `count` are O(1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Protocol, final

import immutables
from pyrsistent import PVector, pvector

from ._canonical import merkle_root
from ._fact import Fact
from ._key import ContextKey

__all__ = ["Context", "ContextSnapshot"]


class Context(Protocol):
    """What a suggestor may read. Any class with these members qualifies."""

    def has(self, key: ContextKey, /) -> bool:
        """Whether any fact lives under `key`."""
        ...

    def get(self, key: ContextKey, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order."""
        ...

    def count(self, key: ContextKey, /) -> int:
        """How many facts live under `key`."""
        ...

    def find(self, key: ContextKey, id: str, /) -> Fact | None:
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


_EMPTY_FACTS: Final[PVector[Fact]] = pvector()
_EMPTY_IDS: Final[immutables.Map[str, Fact]] = immutables.Map()


@final
class _KeyStore:
    """The facts of one key: insertion order plus an id index, both persistent."""

    __slots__ = ("facts", "ids")

    def __init__(self, facts: PVector[Fact], ids: immutables.Map[str, Fact]) -> None:
        self.facts = facts
        self.ids = ids


@final
class ContextSnapshot:
    """An immutable view of every fact, shared by all suggestors of a cycle.

    Build an empty one with [`empty`][converge.ContextSnapshot.empty]; the engine derives every
    other. A snapshot from one run may start the next (`engine.run(context=...)`).
    """

    __slots__ = ("__weakref__", "_clock", "_cycle", "_root", "_stores", "_version")

    _stores: dict[ContextKey, _KeyStore]
    _version: int
    _cycle: int
    _clock: int
    _root: str | None

    def __init__(self) -> None:
        raise TypeError("use ContextSnapshot.empty(); the engine derives every other snapshot")

    @classmethod
    def _make(
        cls, stores: dict[ContextKey, _KeyStore], version: int, cycle: int, clock: int
    ) -> ContextSnapshot:
        snapshot = object.__new__(cls)
        object.__setattr__(snapshot, "_stores", stores)
        object.__setattr__(snapshot, "_version", version)
        object.__setattr__(snapshot, "_cycle", cycle)
        object.__setattr__(snapshot, "_clock", clock)
        object.__setattr__(snapshot, "_root", None)
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

    def has(self, key: ContextKey, /) -> bool:
        """Whether any fact lives under `key`."""
        return key in self._stores

    def get(self, key: ContextKey, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order (a persistent vector; O(1))."""
        store = self._stores.get(key)
        return _EMPTY_FACTS if store is None else store.facts

    def count(self, key: ContextKey, /) -> int:
        """How many facts live under `key`."""
        store = self._stores.get(key)
        return 0 if store is None else len(store.facts)

    def find(self, key: ContextKey, id: str, /) -> Fact | None:
        """The fact with `id` under `key`, or `None`."""
        store = self._stores.get(key)
        return None if store is None else store.ids.get(id)

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
        return sum(len(store.facts) for store in self._stores.values())

    def __iter__(self) -> Iterator[Fact]:
        return iter(self.facts())

    def __repr__(self) -> str:
        counts = ", ".join(f"{key.value}={len(self._stores[key].facts)}" for key in self.keys())
        return f"ContextSnapshot(cycle={self._cycle}, version={self._version}, {counts or 'empty'})"

    def keys(self) -> tuple[ContextKey, ...]:
        """The keys that hold facts, in key order."""
        return tuple(key for key in ContextKey if key in self._stores)

    def facts(self) -> tuple[Fact, ...]:
        """Every fact, in key order, then insertion order."""
        return tuple(fact for key in self.keys() for fact in self._stores[key].facts)

    def merkle_root(self) -> str:
        """The hex Merkle root over every fact's digest, in `facts()` order; computed once."""
        root = self._root
        if root is None:
            root = merkle_root(bytes.fromhex(fact.digest) for fact in self.facts())
            object.__setattr__(self, "_root", root)
        return root

    # -- kernel use --------------------------------------------------------------------------

    def _at_cycle(self, cycle: int) -> ContextSnapshot:
        if cycle == self._cycle:
            return self
        return ContextSnapshot._make(self._stores, self._version, cycle, self._clock)

    def _extend(self, facts: Iterable[Fact], cycle: int, clock: int) -> ContextSnapshot:
        """A new snapshot with `facts` appended (ids must be new); shares everything else."""
        grouped: dict[ContextKey, list[Fact]] = {}
        added = 0
        for fact in facts:
            grouped.setdefault(fact.key, []).append(fact)
            added += 1
        if not added:
            return self._at_cycle(cycle)
        stores = dict(self._stores)
        for key, new in grouped.items():
            store = stores.get(key)
            old_facts, old_ids = (
                (_EMPTY_FACTS, _EMPTY_IDS) if store is None else (store.facts, store.ids)
            )
            mutation = old_ids.mutate()
            for fact in new:
                mutation[fact.id] = fact
            ids = mutation.finish()
            stores[key] = _KeyStore(old_facts.extend(new), ids)
        if len(stores) != len(self._stores):
            stores = {key: stores[key] for key in ContextKey if key in stores}
        return ContextSnapshot._make(stores, self._version + added, cycle, clock)
