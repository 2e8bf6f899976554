"""FactSequence: snapshots of one line share a store; an older one that grows starts its own."""

import sys
import threading
import time

from converge import ContextKey, ContextSnapshot, Engine, Fact, IntegrityProof, ProposedFact, verify
from converge._sequence import EMPTY_FACTS, FactSequence

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


def test_the_empty_sequence_never_grows_in_place() -> None:
    facts, leaves = _facts(2)
    one = EMPTY_FACTS.extended(facts[:1], leaves[:1])
    other = EMPTY_FACTS.extended(facts[1:], leaves[1:])
    assert len(EMPTY_FACTS) == 0
    assert list(EMPTY_FACTS) == []
    assert [f.id for f in one] == ["f0"]
    assert [f.id for f in other] == ["f1"]
    assert one.find("f1") is None
    assert other.find("f0") is None


def test_a_sequence_hides_what_its_successors_added() -> None:
    facts, leaves = _facts(6)
    first = EMPTY_FACTS.extended(facts[:2], leaves[:2])
    second = first.extended(facts[2:4], leaves[2:4])
    assert [f.id for f in first] == ["f0", "f1"]
    assert len(first) == 2
    assert first.find("f2") is None
    assert first.find("f0") is facts[0]  # its own, found past the newest's shortcut
    assert second.find("f2") is facts[2]
    assert second.find("f5") is None
    assert list(first.leaves()) == leaves[:2]
    assert list(second.leaves()) == leaves[:4]
    assert first[-1] is facts[1]
    assert first[::-1] == (facts[1], facts[0])
    assert first != second
    assert first == tuple(facts[:2])


def test_an_append_in_place_marks_the_older_sequence_before_any_id_is_added() -> None:
    # `find` reads the newest flag after its id lookup: a reader that finds an id added
    # after its snapshot must therefore see the flag already cleared.
    facts, leaves = _facts(3)
    seen: list[bool] = []

    class Watching(dict[str, Fact]):
        def __setitem__(self, ident: str, fact: Fact) -> None:
            seen.append(base._newest)  # pyright: ignore[reportPrivateUsage]
            super().__setitem__(ident, fact)

    by_id = Watching({facts[0].id: facts[0]})
    base = FactSequence(facts[:1], leaves[:1], {facts[0].id: 0}, by_id, 1)
    assert base.find(facts[1].id) is None
    grown = base.extended(facts[1:], leaves[1:])
    assert seen == [False, False]
    assert base.find(facts[1].id) is None
    assert base.find(facts[0].id) is facts[0]
    assert grown.find(facts[2].id) is facts[2]


class _SlowList(list[Fact]):
    """A store whose length takes a while to read: the check of whether a sequence is the
    newest of its line is then as long as a thread switch, so a race would show."""

    def __len__(self) -> int:
        length = super().__len__()
        time.sleep(0.002)  # releases the GIL: the other threads run meanwhile
        return length


def test_threads_extending_one_sequence_at_once_each_get_their_own_line() -> None:
    workers = 4
    facts, leaves = _facts(1 + workers)
    base = FactSequence(
        _SlowList(facts[:1]), leaves[:1], {facts[0].id: 0}, {facts[0].id: facts[0]}, 1
    )
    results: list[FactSequence | None] = [None] * workers
    barrier = threading.Barrier(workers)

    def grow(worker: int) -> None:
        mine = slice(1 + worker, 2 + worker)
        barrier.wait()
        results[worker] = base.extended(facts[mine], leaves[mine])

    threads = [threading.Thread(target=grow, args=(worker,)) for worker in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert list(base) == facts[:1]
    for worker, sequence in enumerate(results):
        assert sequence is not None
        own = facts[1 + worker]
        assert list(sequence) == [facts[0], own]
        assert list(sequence.leaves()) == [leaves[0], bytes.fromhex(own.digest)]
        assert sequence.find(own.id) is own
        assert all(sequence.find(f.id) is None for f in facts[1:] if f is not own)


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
