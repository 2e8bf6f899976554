"""Snapshots of one line share its stores; an older one that grows starts a line of its own."""

import sys
import threading
import time
from typing import SupportsIndex, overload

from converge import ContextKey, ContextSnapshot, Engine, Fact, IntegrityProof, ProposedFact, verify
from converge._core._sequence import EMPTY_FACTS, EMPTY_STORE, FactSequence

S = ContextKey.SEEDS


def _proposal(ident: str, content: str = "") -> ProposedFact:
    return ProposedFact(key=S, id=ident, content=content or f"fact {ident}", provenance="test")


def _grown(context: ContextSnapshot, *proposals: ProposedFact) -> ContextSnapshot:
    return Engine().run_sync(context, inputs=list(proposals)).context


def _ids(context: ContextSnapshot) -> list[str]:
    return [fact.id for fact in context.get(S)]


def _facts(count: int) -> tuple[list[Fact], list[bytes]]:
    context = _grown(ContextSnapshot.empty(), *(_proposal(f"f{n}") for n in range(count)))
    facts = list(context.get(S))
    return facts, [bytes.fromhex(fact.digest) for fact in facts]


def test_two_runs_from_one_snapshot_each_see_only_their_own_facts() -> None:
    base = _grown(ContextSnapshot.empty(), _proposal("a"))
    left = _grown(base, _proposal("b"), _proposal("same", "left"))  # appends to base's store
    right = _grown(base, _proposal("c"), _proposal("same", "right"))  # copies base's first
    assert _ids(base) == ["a"]
    assert _ids(left) == ["a", "b", "same"]
    assert _ids(right) == ["a", "c", "same"]
    assert base.find(S, "b") is None
    assert base.find(S, "same") is None
    base_a = base.find(S, "a")  # left grew base's store: base checks positions now
    assert base_a is not None
    assert base_a is left.find(S, "a")
    assert left.find(S, "c") is None
    assert right.find(S, "b") is None
    left_same, right_same = left.find(S, "same"), right.find(S, "same")
    assert left_same is not None
    assert left_same.content == "left"
    assert right_same is not None
    assert right_same.content == "right"
    for context in (base, left, right):
        assert verify(context, IntegrityProof.of(context))
    # each line goes on growing on its own
    further = _grown(right, _proposal("d"))
    assert _ids(further) == ["a", "c", "same", "d"]
    assert _ids(left) == ["a", "b", "same"]


def _line(facts: list[Fact], leaves: list[bytes], *sizes: int) -> list[ContextSnapshot]:
    """Snapshots of one line from `empty()`, each adding the next `size` facts."""
    snapshots = [ContextSnapshot.empty()]
    done = 0
    for cycle, size in enumerate(sizes, 1):
        new = slice(done, done + size)
        snapshots.append(
            snapshots[-1]._extend(facts[new], leaves[new], cycle, done + size)  # pyright: ignore[reportPrivateUsage]
        )
        done += size
    return snapshots


def test_the_empty_store_is_never_appended_to() -> None:
    facts, leaves = _facts(2)
    empty = ContextSnapshot.empty()
    one = empty._extend(facts[:1], leaves[:1], 1, 1)  # pyright: ignore[reportPrivateUsage]
    other = ContextSnapshot.empty()._extend(facts[1:], leaves[1:], 1, 1)  # pyright: ignore[reportPrivateUsage]
    assert EMPTY_STORE.facts == []
    assert EMPTY_STORE.by_id == {}
    assert len(EMPTY_FACTS) == 0
    assert list(EMPTY_FACTS) == []
    assert _ids(one) == ["f0"]
    assert _ids(other) == ["f1"]
    assert one.find(S, "f1") is None
    assert other.find(S, "f0") is None
    assert empty.find(S, "f0") is None
    assert empty.count(S) == 0
    assert not empty.has(S)


def test_a_snapshot_hides_what_its_successors_added() -> None:
    facts, leaves = _facts(6)
    _, first, second = _line(facts, leaves, 2, 2)
    assert _ids(first) == ["f0", "f1"]
    assert first.count(S) == 2
    assert first.has(S)
    assert first.find(S, "f2") is None
    assert first.find(S, "f0") is facts[0]  # its own, found past the newest's shortcut
    assert second.find(S, "f2") is facts[2]
    assert second.find(S, "f5") is None
    view, later = first.get(S), second.get(S)
    assert isinstance(view, FactSequence)
    assert isinstance(later, FactSequence)
    assert list(view.leaves()) == leaves[:2]
    assert list(later.leaves()) == leaves[:4]
    assert view.find("f0") is facts[0]
    assert view.find("f2") is None
    assert later.find("f3") is facts[3]
    assert view[-1] is facts[1]
    assert view[::-1] == (facts[1], facts[0])
    assert view != later
    assert view == tuple(facts[:2])
    assert first.facts() == tuple(facts[:2])
    assert (
        first.merkle_root()
        == _grown(ContextSnapshot.empty(), *map(_restated, facts[:2])).merkle_root()
    )


def _restated(fact: Fact) -> ProposedFact:
    return _proposal(fact.id, fact.content)


def test_an_older_snapshot_sees_only_its_own_facts_under_every_key() -> None:
    # positions are the line's: an older snapshot counts each key's facts below its size,
    # a key whose first fact came later (the SIGNALS below) shows nothing in it
    seeds = [_proposal(f"s{n}") for n in range(3)]
    signals = [
        ProposedFact(key=ContextKey.SIGNALS, id=f"g{n}", content="g", provenance="t")
        for n in range(2)
    ]
    mixed = _grown(ContextSnapshot.empty(), seeds[0], signals[0], seeds[1])
    facts = [*mixed.get(S)[:1], *mixed.get(ContextKey.SIGNALS), *mixed.get(S)[1:]]
    leaves = [bytes.fromhex(fact.digest) for fact in facts]
    base = ContextSnapshot.empty()._extend(facts[:1], leaves[:1], 1, 1)  # pyright: ignore[reportPrivateUsage]
    grown = base._extend(facts[1:], leaves[1:], 2, 3)  # pyright: ignore[reportPrivateUsage]
    assert base.keys() == (S,)
    assert base.count(ContextKey.SIGNALS) == 0
    assert not base.has(ContextKey.SIGNALS)
    assert list(base.get(ContextKey.SIGNALS)) == []
    assert base.find(ContextKey.SIGNALS, "g0") is None
    assert base.facts() == (facts[0],)
    assert "seeds=1" in repr(base)
    assert grown.keys() == (S, ContextKey.SIGNALS)
    assert grown.count(S) == 2
    assert grown.count(ContextKey.SIGNALS) == 1
    assert [fact.id for fact in grown.facts()] == ["s0", "s1", "g0"]
    assert grown.merkle_root() == mixed.merkle_root()
    for context in (base, grown):
        assert verify(context, IntegrityProof.of(context))


def test_a_snapshot_of_the_next_cycle_takes_the_line_over() -> None:
    facts, leaves = _facts(3)
    _, base = _line(facts, leaves, 1)
    moved = base._at_cycle(2)  # pyright: ignore[reportPrivateUsage]
    assert moved._newest  # pyright: ignore[reportPrivateUsage]
    assert not base._newest  # pyright: ignore[reportPrivateUsage]
    grown = moved._extend(facts[1:2], leaves[1:2], 3, 2)  # pyright: ignore[reportPrivateUsage]
    assert grown._stores is base._stores  # pyright: ignore[reportPrivateUsage]  # in place
    assert _ids(base) == _ids(moved) == ["f0"]
    assert base.find(S, "f1") is None
    other = base._extend(facts[2:], leaves[2:], 2, 2)  # pyright: ignore[reportPrivateUsage]
    assert other._stores is not base._stores  # pyright: ignore[reportPrivateUsage]  # copied
    assert _ids(other) == ["f0", "f2"]
    assert _ids(grown) == ["f0", "f1"]
    assert other.find(S, "f1") is None


def test_an_append_in_place_marks_the_older_snapshot_before_any_id_is_added() -> None:
    # `find` tests the snapshot's newest flag after its id lookup: a reader that finds an id
    # added after its snapshot must therefore see the flag already cleared, and the id
    # already in its store's positions.
    facts, leaves = _facts(3)
    seen: list[bool] = []

    class Watching(dict[str, Fact]):
        def __setitem__(self, ident: str, fact: Fact) -> None:
            store = base._stores[S]  # pyright: ignore[reportPrivateUsage]
            seen.append(not base._newest and ident in store.positions)  # pyright: ignore[reportPrivateUsage]
            super().__setitem__(ident, fact)

    _, base = _line(facts, leaves, 1)
    store = base._stores[S]  # pyright: ignore[reportPrivateUsage]
    store.by_id = Watching(store.by_id)
    assert base.find(S, facts[1].id) is None
    grown = base._extend(facts[1:], leaves[1:], 2, 3)  # pyright: ignore[reportPrivateUsage]
    assert seen == [True, True]
    assert base.find(S, facts[1].id) is None
    assert base.find(S, facts[0].id) is facts[0]
    assert grown.find(S, facts[2].id) is facts[2]


class _SlowList(list[Fact]):
    """A store's list that takes a while to grow (`append` waits before it adds) and to read
    (an item, or a copy with `slices_only`, waits after it is taken): the thread switches
    land where a race would show."""

    def __init__(
        self, facts: list[Fact], *, grow: float = 0.0, read: float, slices_only: bool = False
    ) -> None:
        super().__init__(facts)
        self.grow, self.read, self.slices_only = grow, read, slices_only

    def append(self, fact: Fact, /) -> None:
        time.sleep(self.grow)  # releases the GIL: the other threads run meanwhile
        super().append(fact)

    @overload
    def __getitem__(self, index: SupportsIndex, /) -> Fact: ...
    @overload
    def __getitem__(self, index: slice, /) -> list[Fact]: ...
    def __getitem__(self, index: SupportsIndex | slice, /) -> Fact | list[Fact]:
        taken = super().__getitem__(index)
        if isinstance(index, slice) or not self.slices_only:
            time.sleep(self.read)
        return taken


def test_threads_extending_one_snapshot_at_once_each_get_their_own_line() -> None:
    workers = 4
    facts, leaves = _facts(1 + workers)
    _, base = _line(facts, leaves, 1)
    store = base._stores[S]  # pyright: ignore[reportPrivateUsage]
    # without the lock, the copies take theirs while the append in place is half done
    store.facts = _SlowList(store.facts, grow=0.002, read=0.004, slices_only=True)
    results: list[ContextSnapshot | None] = [None] * workers
    barrier = threading.Barrier(workers)

    def grow(worker: int) -> None:
        mine = slice(1 + worker, 2 + worker)
        barrier.wait()
        results[worker] = base._extend(facts[mine], leaves[mine], 2, 2)  # pyright: ignore[reportPrivateUsage]

    threads = [threading.Thread(target=grow, args=(worker,)) for worker in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _ids(base) == ["f0"]
    for worker, snapshot in enumerate(results):
        assert snapshot is not None
        own = facts[1 + worker]
        assert list(snapshot.get(S)) == [facts[0], own]
        view = snapshot.get(S)
        assert isinstance(view, FactSequence)
        assert list(view.leaves()) == [leaves[0], bytes.fromhex(own.digest)]
        assert snapshot.find(S, own.id) is own
        assert all(snapshot.find(S, f.id) is None for f in facts[1:] if f is not own)
        assert verify(snapshot, IntegrityProof.of(snapshot))


def test_a_reader_of_an_older_snapshot_never_sees_what_a_thread_appends_meanwhile() -> None:
    # One thread grows a line fact by fact (each append in place); another reads, in a
    # tight loop, the snapshot the writer is growing, for the id the writer is adding.
    facts, leaves = _facts(2000)
    published = [_grown(ContextSnapshot.empty(), _proposal("f0"))]
    done = threading.Event()
    wrong: list[str] = []

    def write() -> None:
        snapshot = published[0]
        for n in range(1, len(facts)):
            snapshot = snapshot._extend(  # pyright: ignore[reportPrivateUsage]
                facts[n : n + 1], leaves[n : n + 1], n, n + 1
            )
            published.append(snapshot)
        done.set()

    def read() -> None:
        while not done.is_set():
            n = len(published) - 1
            snapshot = published[n]
            if n + 1 < len(facts) and snapshot.find(S, facts[n + 1].id) is not None:
                wrong.append(f"snapshot {n} found {facts[n + 1].id}")
            if snapshot.find(S, facts[n].id) is None:
                wrong.append(f"snapshot {n} lost {facts[n].id}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read), threading.Thread(target=write)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    assert [fact.id for fact in published[-1].get(S)] == [fact.id for fact in facts]


def test_an_older_snapshot_counts_its_facts_while_a_thread_appends_to_its_store() -> None:
    # `base` sees every SEEDS fact its store holds when it reads the last one; the writer
    # appends another before `base` counts them: it must count its own, not the list's.
    facts, leaves = _facts(2)
    signal = _grown(
        ContextSnapshot.empty(),
        ProposedFact(key=ContextKey.SIGNALS, id="g", content="g", provenance="t"),
    )
    other = signal.get(ContextKey.SIGNALS)[0]
    _, base = _line(facts, leaves, 1)
    newest = base._extend([other], [bytes.fromhex(other.digest)], 2, 2)  # pyright: ignore[reportPrivateUsage]
    store = base._stores[S]  # pyright: ignore[reportPrivateUsage]
    store.facts = _SlowList(store.facts, read=0.002)  # the writer appends while it reads
    counted: list[int] = []
    reader = threading.Thread(target=lambda: counted.append(base.count(S)))
    reader.start()
    time.sleep(0.001)  # the reader is reading the last fact
    grown = newest._extend(facts[1:], leaves[1:], 3, 3)  # pyright: ignore[reportPrivateUsage]
    reader.join()
    assert counted == [1]
    assert base.count(S) == 1
    assert grown.count(S) == 2


def test_a_snapshot_counts_by_position_when_it_sees_an_append_before_its_flag() -> None:
    # Without the GIL, a reader may see a longer `facts` list before it sees the flag that
    # says its snapshot is no longer the newest: the append is laid out here as such a
    # reader sees it (the store grown, the flag still set). Counts, views, iteration and the
    # root must hold the snapshot's own facts.
    facts, leaves = _facts(3)
    newest = _line(facts, leaves, 2)[-1]
    assert newest._newest  # pyright: ignore[reportPrivateUsage]
    root = newest.merkle_root()
    store = newest._stores[S]  # pyright: ignore[reportPrivateUsage]
    store.add(facts[2], leaves[2], len(newest))  # what a writer does after the flag
    assert newest.count(S) == 2
    assert [fact.id for fact in newest.get(S)] == ["f0", "f1"]
    assert [fact.id for fact in newest.facts()] == ["f0", "f1"]
    assert len(list(newest._kept())) == 2  # pyright: ignore[reportPrivateUsage]
    assert newest.merkle_root() == root


def test_a_snapshot_counts_by_the_tail_when_it_sees_a_longer_list_before_it() -> None:
    # Without the GIL, a reader may see `facts` grown before the store's `tail` that the
    # writer stores after the append: laid out here as such a reader sees it. The tail
    # alone says how many facts there are, and the count and position in it agree.
    facts, leaves = _facts(3)
    newest = _line(facts, leaves, 2)[-1]
    store = newest._stores[S]  # pyright: ignore[reportPrivateUsage]
    assert store.tail == (2, 1)
    store.positions["f2"] = len(newest)  # `add` up to its last step: the tail not yet stored
    store.by_id["f2"] = facts[2]
    store.facts.append(facts[2])
    store.leaves.append(leaves[2])
    assert newest.count(S) == 2
    assert store.visible(len(newest) + 1) == 2
    assert [fact.id for fact in newest.get(S)] == ["f0", "f1"]
    assert store.prefix(len(newest)).tail == (2, 1)
