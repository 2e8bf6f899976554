"""ContextSnapshot: immutable, O(1) lookups, structure shared between snapshots."""

from collections.abc import Iterable

import pytest

from converge import (
    Context,
    ContextKey,
    ContextSnapshot,
    Engine,
    IntegrityProof,
    ProposedFact,
    known_keys,
    verify,
)
from converge._core._canonical import merkle_root


def seeded(*ids: str, key: ContextKey = ContextKey.SEEDS) -> ContextSnapshot:
    inputs = [ProposedFact(key=key, id=i, content=f"fact {i}", provenance="test") for i in ids]
    return Engine().run_sync(inputs=inputs).context


def test_empty_snapshot_has_nothing() -> None:
    ctx = ContextSnapshot.empty()
    assert not ctx.has(ContextKey.SEEDS)
    assert ctx.count(ContextKey.SEEDS) == 0
    assert list(ctx.get(ContextKey.SEEDS)) == []
    assert ctx.find(ContextKey.SEEDS, "x") is None
    assert ctx.version == 0
    assert ctx.cycle == 0
    assert ctx.keys() == ()
    assert ctx.facts() == ()


def test_an_empty_snapshot_has_an_empty_store_for_every_key_known_so_far() -> None:
    """The readers index the stores: a key known when the line began is found without the
    `KeyError` path (about 0.3 µs), while `keys()` lists only the keys that hold facts."""
    ctx = ContextSnapshot.empty()
    stores = ctx._stores  # pyright: ignore[reportPrivateUsage]
    assert tuple(stores) == known_keys()
    assert all(not store.facts for store in stores.values())
    assert ctx.keys() == ()


def test_snapshot_constructor_is_refused() -> None:
    with pytest.raises(TypeError, match=r"ContextSnapshot\.empty"):
        ContextSnapshot()


def test_snapshot_satisfies_context_protocol() -> None:
    ctx: Context = ContextSnapshot.empty()
    assert ctx.version == 0


def test_snapshot_get_keeps_insertion_order() -> None:
    ctx = seeded("c", "a", "b")
    assert [f.id for f in ctx.get(ContextKey.SEEDS)] == ["c", "a", "b"]


def test_snapshot_find_has_count() -> None:
    ctx = seeded("a", "b")
    fact = ctx.find(ContextKey.SEEDS, "b")
    assert fact is not None
    assert fact.content == "fact b"
    assert ctx.has(ContextKey.SEEDS)
    assert not ctx.has(ContextKey.HYPOTHESES)
    assert ctx.count(ContextKey.SEEDS) == 2


def test_snapshot_keys_are_separate_namespaces() -> None:
    engine = Engine()
    result = engine.run_sync(
        inputs=[
            ProposedFact(key=ContextKey.HYPOTHESES, id="x", content="h", provenance="t"),
            ProposedFact(key=ContextKey.SEEDS, id="x", content="s", provenance="t"),
        ]
    )
    ctx = result.context
    assert ctx.keys() == (ContextKey.SEEDS, ContextKey.HYPOTHESES)
    assert [f.content for f in ctx.facts()] == ["s", "h"]


def test_snapshot_is_immutable() -> None:
    ctx = seeded("a")
    with pytest.raises(AttributeError):
        ctx._size = 5  # pyright: ignore[reportPrivateUsage]


def test_snapshot_get_cannot_be_mutated() -> None:
    ctx = seeded("a")
    facts = ctx.get(ContextKey.SEEDS)
    with pytest.raises(TypeError):
        facts[0] = facts[0]  # pyright: ignore[reportIndexIssue]
    assert ctx.count(ContextKey.SEEDS) == 1


def test_next_run_leaves_the_earlier_snapshot_unchanged() -> None:
    first = seeded("a")
    second = Engine().run_sync(
        first,
        inputs=[ProposedFact(key=ContextKey.SEEDS, id="b", content="b", provenance="t")],
    )
    assert first.count(ContextKey.SEEDS) == 1
    assert second.context.count(ContextKey.SEEDS) == 2
    assert first.find(ContextKey.SEEDS, "b") is None


def test_snapshots_share_the_stores_of_unchanged_keys() -> None:
    first = seeded("a", "b")
    second = (
        Engine()
        .run_sync(
            first,
            inputs=[ProposedFact(key=ContextKey.SIGNALS, id="s", content="s", provenance="t")],
        )
        .context
    )
    assert second._stores[ContextKey.SEEDS] is first._stores[ContextKey.SEEDS]  # pyright: ignore[reportPrivateUsage]


def test_snapshot_version_counts_facts_over_its_history() -> None:
    first = seeded("a", "b")
    second = (
        Engine()
        .run_sync(
            first,
            inputs=[ProposedFact(key=ContextKey.SIGNALS, id="s", content="s", provenance="t")],
        )
        .context
    )
    assert first.version == 2
    assert second.version == 3
    assert len(second) == 3


def test_snapshot_repr_is_short() -> None:
    assert repr(seeded("a")) == "ContextSnapshot(cycle=0, version=1, seeds=1)"


def test_snapshot_merkle_root_of_empty_is_sha256_of_nothing() -> None:
    assert (
        ContextSnapshot.empty().merkle_root()
        == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_snapshot_get_is_a_sequence_with_indexing_slicing_and_equality() -> None:
    ctx = seeded("a", "b", "c")
    facts = ctx.get(ContextKey.SEEDS)
    assert len(facts) == 3
    assert facts[0].id == "a"
    assert facts[-1].id == "c"
    assert [f.id for f in facts[1:]] == ["b", "c"]
    assert facts == tuple(ctx.facts())
    assert facts == list(ctx.facts())
    assert facts.index(facts[1]) == 1
    assert facts[1] in facts
    with pytest.raises(IndexError, match="fact index 3 out of range for 3 facts"):
        facts[3]


def test_snapshot_get_of_a_later_snapshot_does_not_change_the_earlier_view() -> None:
    first = seeded("a")
    view = first.get(ContextKey.SEEDS)
    second = (
        Engine()
        .run_sync(
            first, inputs=[ProposedFact(key=ContextKey.SEEDS, id="b", content="b", provenance="t")]
        )
        .context
    )
    assert [f.id for f in view] == ["a"]
    assert [f.id for f in second.get(ContextKey.SEEDS)] == ["a", "b"]


def test_a_growing_key_reads_like_a_list_in_every_snapshot() -> None:
    # Every snapshot of a line shares one store per key and sees a prefix of it; grow one key
    # in uneven steps and compare every snapshot along the way with a plain list.
    steps = [1, 62, 1, 1, 64, 65, 3, 130, 2200]
    context = ContextSnapshot.empty()
    expected: list[str] = []
    earlier: list[tuple[ContextSnapshot, list[str]]] = []
    engine = Engine()
    for step, size in enumerate(steps):
        ids = [f"s{step}-{n}" for n in range(size)]
        inputs = [ProposedFact(key=ContextKey.SEEDS, id=i, content=i, provenance="t") for i in ids]
        context = engine.run_sync(context, inputs=inputs).context
        expected = [*expected, *ids]
        earlier.append((context, expected))
    for snapshot, ids in earlier:  # older snapshots are unchanged by later growth
        facts = snapshot.get(ContextKey.SEEDS)
        assert len(facts) == snapshot.count(ContextKey.SEEDS) == len(ids)
        assert [fact.id for fact in facts] == ids
        assert [facts[index].id for index in range(len(ids))] == ids
        assert [facts[-index].id for index in range(1, len(ids) + 1)] == ids[::-1]
        assert [fact.id for fact in facts[5:300:7]] == ids[5:300:7]
        assert [fact.id for fact in facts[::-3]] == ids[::-3]
        assert all(
            snapshot.find(ContextKey.SEEDS, ident) is facts[n] for n, ident in enumerate(ids)
        )
        with pytest.raises(IndexError):
            facts[len(ids)]
        # the leaves stay aligned with the facts: the proof verifies, fact by fact
        assert verify(snapshot, IntegrityProof.of(snapshot))
        assert snapshot.merkle_root() == merkle_root(bytes.fromhex(f.digest) for f in facts)


def test_the_merkle_root_is_computed_on_its_first_read_then_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import converge._core._context as context

    snapshot = seeded("a", "b")
    built: list[str] = []

    def counted(leaves: Iterable[bytes]) -> str:
        root = merkle_root(leaves)
        built.append(root)
        return root

    monkeypatch.setattr(context, "merkle_root", counted)
    first = snapshot.merkle_root()
    assert snapshot.merkle_root() == first
    assert built == [first]  # once: kept by the snapshot
    later = seeded("a", "b", "c")
    assert later.merkle_root() != first
    assert len(built) == 2
