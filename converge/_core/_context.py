"""The `Context` protocol and `ContextSnapshot`, the immutable context.

A snapshot shares with the other snapshots of its line of history one store per key: the
key's facts in insertion order, the id → position and id → fact maps and the leaf digest
the seal computed for each fact when it was promoted (or restored) (`_sequence`). It sees
the facts below its size, and knows whether it is the newest of its line (nothing added
after it). Taking a new snapshot from the newest costs O(facts added); from an older one,
O(facts) once. On the newest, `find`, `has`, `count` and `get` (a view, `FactSequence`)
are O(1); on an older one `find` is O(1), the others O(log facts) per key.

Every key known when a line of snapshots begins (`empty`: the built-in keys and those
declared so far) has a store from the start, empty (`EMPTY_STORE`) until its first fact; a
key declared later has one from its first fact on. The readers index the stores
(`stores[key]`) and catch the `KeyError` of a key declared after the line began and still
without facts, or of a name no key has: on W1's `accepts` calls, about 5 ns less a `find`
than `stores.get(key)` (a specialised subscript against a method call). The `KeyError` costs
about 0.3 µs, which is why the keys declared so far are there from the start: keys are
declared when their modules are imported, before any run.

The Merkle root is built from the kept leaves, never from a digest read off a fact later, so
a fact object changed below the public API (its `__dict__` written with
`object.__setattr__`, say, and its `digest` recomputed) changes neither the root nor the
proof, and `verify` finds it. Code that rewrites the kept leaf as well (the stores'
private lists) is past what the process can find by itself: replaying the recorded effects
finds it (see the integrity docs, "In-process code").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, islice
from typing import Protocol, final

from ._canonical import merkle_root
from ._fact import Fact
from ._key import AnyKey, KeyLike, in_key_order, key_named, known_keys
from ._sequence import EMPTY_FACTS, EMPTY_STORE, EXTENDING, FactSequence, FactStore

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

    __slots__ = ("__weakref__", "_clock", "_cycle", "_newest", "_root", "_size", "_stores")

    _stores: dict[AnyKey, FactStore]
    """The line's stores, shared with the other snapshots of the line."""
    _newest: bool
    """Nothing was added to the line after this snapshot: it sees every fact of its stores.
    Cleared (under `EXTENDING`) before anything is added, or when a snapshot of another
    cycle takes over the line (`_at_cycle`); read after what it guards."""
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
        stores: dict[AnyKey, FactStore],
        cycle: int,
        clock: int,
        size: int = 0,
        newest: bool = True,
    ) -> ContextSnapshot:
        snapshot = object.__new__(cls)
        # the slots written through their descriptors: half the cost of object.__setattr__
        # (`_root` is left unset until the root is computed)
        _set_newest(snapshot, newest)
        _set_size(snapshot, size)
        _set_stores(snapshot, stores)
        _set_cycle(snapshot, cycle)
        _set_clock(snapshot, clock)
        return snapshot

    @classmethod
    def empty(cls) -> ContextSnapshot:
        """A context with no facts, at cycle 0."""
        return cls._make(dict.fromkeys(known_keys(), EMPTY_STORE), 0, 0)

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
        return self._seen(store) != 0

    def get(self, key: KeyLike, /) -> Sequence[Fact]:
        """The facts under `key`, in insertion order (a view, nothing copied).

        Raises:
            ValueError: `key` is a name that no built-in or declared key has.
        """
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return EMPTY_FACTS
        return store.sequence(self._seen(store))

    def count(self, key: KeyLike, /) -> int:
        """How many facts live under `key` (a name no key has raises `ValueError`)."""
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return 0
        return self._seen(store)

    def find(self, key: KeyLike, id: str, /) -> Fact | None:
        """The fact with `id` under `key`, or `None` (a name no key has raises `ValueError`)."""
        try:
            store = self._stores[key]  # pyright: ignore[reportArgumentType]  # a name finds its key
        except KeyError:
            _known(key)
            return None
        fact = store.by_id.get(id)
        if fact is None or self._newest:  # the flag after the lookup: see `_sequence`
            return fact
        # an older snapshot of its line: the id may have been added after it
        if store.positions[id] < self._size:
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
        counts = ", ".join(f"{key.value}={len(view)}" for key, view in self._views())
        return f"ContextSnapshot(cycle={self._cycle}, version={self._size}, {counts or 'empty'})"

    def keys(self) -> tuple[AnyKey, ...]:
        """The keys that hold facts, in key order."""
        return tuple([key for key, _ in self._views()])

    def facts(self) -> tuple[Fact, ...]:
        """Every fact, in key order, then insertion order."""
        return tuple(chain.from_iterable(view for _, view in self._views()))

    def merkle_root(self) -> str:
        """The hex Merkle root over the facts' leaves, in `facts()` order; computed once.

        The leaves are the digests the engine computed when it promoted (or restored) each
        fact, kept by the context, not the `digest` a fact object carries now.
        """
        try:
            return self._root
        except AttributeError:  # not computed yet
            leaves = chain.from_iterable(view.leaves() for _, view in self._views())
            root = merkle_root(leaves)
            _set_root(self, root)
            return root

    def _sealed(self) -> Iterator[tuple[Fact, bytes]]:
        """Every fact with the leaf digest the engine kept for it, in `facts()` order."""
        for _, view in self._views():
            yield from zip(view, view.leaves(), strict=True)

    def _kept(
        self, since: Mapping[AnyKey, int] | None = None
    ) -> Iterator[tuple[AnyKey, FactStore, Fact, bytes]]:
        """Every fact in `facts()` order (past `since[key]` under each key, when given), with
        the store that keeps it and the leaf digest kept for it."""
        for key, store in self._stores.items():
            length = self._seen(store)
            start = 0 if since is None else since.get(key, 0)
            if length > start:
                facts = store.facts[start:length] if start else islice(store.facts, length)
                for fact, leaf in zip(facts, store.leaves[start:length], strict=False):
                    yield key, store, fact, leaf

    def _columns(self) -> Iterator[tuple[AnyKey, FactStore, list[Fact], list[bytes]]]:
        """Each key this snapshot sees facts under, with the store that keeps them, its facts
        and their kept leaves, in `facts()` order."""
        for key, store in self._stores.items():
            length = self._seen(store)
            if length:
                yield key, store, store.facts[:length], store.leaves[:length]

    def _seen(self, store: FactStore) -> int:
        """How many of `store`'s facts this snapshot sees."""
        # By the store's tail, never by the flag or a list's length: either races an append
        # without the GIL (see `_sequence`, "Without the GIL"). `FactStore.visible`'s first
        # test, inlined.
        length, last = store.tail
        if last < self._size:
            return length  # the newest snapshot of its line sees every fact
        return store.visible(self._size)

    def _views(self) -> list[tuple[AnyKey, FactSequence]]:
        """Each key this snapshot sees facts under, with its view of them, in key order."""
        views: list[tuple[AnyKey, FactSequence]] = []
        for key, store in self._stores.items():
            length = self._seen(store)
            if length:
                views.append((key, store.sequence(length)))
        return views

    # -- kernel use --------------------------------------------------------------------------

    def _at_cycle(self, cycle: int) -> ContextSnapshot:
        """This context as of `cycle`: the same facts, and the line with them if it had it."""
        if cycle == self._cycle:
            return self
        with EXTENDING:  # the line goes to the new snapshot, or to neither
            newest = self._newest
            _set_newest(self, False)
        return ContextSnapshot._make(self._stores, cycle, self._clock, self._size, newest)

    def _extend(
        self, facts: Sequence[Fact], leaves: Sequence[bytes], cycle: int, clock: int
    ) -> ContextSnapshot:
        """A new snapshot with `facts` added (ids must be new to their keys); the newest of
        the line from here on.

        `leaves` are the facts' digests as the seal computed them, in the same order. On
        the newest snapshot of its line, they are appended to the line's stores in place;
        on any other, to a copy of what it sees, a line of its own.
        """
        if len(leaves) != len(facts):
            raise ValueError(f"{len(facts)} facts but {len(leaves)} leaf digests")
        if not facts:
            return self._at_cycle(cycle)
        size = self._size
        EXTENDING.acquire()  # not `with`: about 0.1 µs less per cycle
        try:
            if self._newest:
                _set_newest(self, False)  # before any fact is added: readers read it after
                stores = self._stores
            else:  # an older snapshot: its own line starts here
                stores = {key: store.prefix(size) for key, store in self._stores.items()}
            if len(facts) == 1:  # most cycles: one fact, under a key that has a store
                fact = facts[0]
                store = stores.get(fact.key)
                if store is None or store is EMPTY_STORE:
                    stores = _appended(stores, fact.key, facts, leaves, size)
                else:
                    store.add(fact, leaves[0], size)
            else:
                for key, group, group_leaves, position in _by_key(facts, leaves, size):
                    stores = _appended(stores, key, group, group_leaves, position)
        finally:
            EXTENDING.release()
        return ContextSnapshot._make(stores, cycle, clock, size + len(facts))


_slots = ContextSnapshot.__dict__
_set_size = _slots["_size"].__set__
_set_stores = _slots["_stores"].__set__
_set_cycle = _slots["_cycle"].__set__
_set_clock = _slots["_clock"].__set__
_set_root = _slots["_root"].__set__
_set_newest = _slots["_newest"].__set__


def _known(key: KeyLike) -> None:
    """Raise `ValueError` when `key` is a plain name that no key has (a typo, say)."""
    if type(key) is str:
        key_named(key)


def _by_key(
    facts: Sequence[Fact], leaves: Sequence[bytes], position: int
) -> Iterator[tuple[AnyKey, Sequence[Fact], Sequence[bytes], int]]:
    """The runs of facts of one key, in order, with their leaves and the position on the
    line of each run's first (one run, the usual case, as is)."""
    start = 0
    key = facts[0].key
    for index, fact in enumerate(facts):
        if fact.key is not key:
            yield key, facts[start:index], leaves[start:index], position + start
            start, key = index, fact.key
    if start:
        yield key, facts[start:], leaves[start:], position + start
    else:
        yield key, facts, leaves, position


def _appended(
    stores: dict[AnyKey, FactStore],
    key: AnyKey,
    facts: Sequence[Fact],
    leaves: Sequence[bytes],
    position: int,
) -> dict[AnyKey, FactStore]:
    """`stores` with `facts` of `key` appended from `position` on (the caller holds
    `EXTENDING`): the same dict, or a new one in key order for a key new to the line."""
    store = stores.get(key)
    if store is None:  # declared after the line began: older snapshots keep their dict
        store = FactStore([], [], {}, {})
        stores = {**stores, key: store}
        stores = {name: stores[name] for name in in_key_order(stores)}
    elif store is EMPTY_STORE:  # the first fact of a key: its own store, for this line
        store = stores[key] = FactStore([], [], {}, {})
    store.append(facts, leaves, position)
    return stores
