"""A run saved after every cycle writes each new fact's journal entry from the text its seal
hashed (`Stamp.promote`'s texts), not from the fact read again: the same JSON, what was
promoted, and a fact changed in memory since is still found by the run's end check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import converge._core._checkpoint as checkpoints
from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    Engine,
    Fact,
    InvariantClass,
    InvariantResult,
    PromotionPolicy,
    ProposedFact,
    RunProgress,
    RunStore,
    SqliteRunStore,
    StopReason,
    verify,
)
from converge._core._checkpoint import fact_records, fact_texts, restore_fact
from converge._core._seal import Stamp, Texts
from converge._kernel._gate import Gate
from converge._kernel._merge import Merger
from converge._kernel._state import RunState
from converge.stores._durable import CycleSaver
from converge.stores._journal import CycleDelta, Journal
from tests.converge.durable_doubles import Delegating

H = ContextKey.HYPOTHESES
KEY = b"a signing key"


class Entries(Delegating):
    """Keeps the JSON of every journal entry it saves, and whether its head was signed."""

    def __init__(self, inner: RunStore) -> None:
        super().__init__(inner)
        self.entries: list[str] = []
        self.signed: list[bool] = []

    async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
        if progress.entry is not None:
            self.entries.append(progress.entry)
            self.signed.append(progress.head.signature is not None)
        return await super().save_progress(progress, expected_version=expected_version)


class Varied:
    """Three cycles of facts: no payload, scalar payloads, odd text, an object and an array."""

    name = "varied"
    dependencies = (ContextKey.SEEDS, H)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) < 9

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(H)
        payloads: list[Any] = [None, 7, 'a \u2028 "quoted" \U0001f600', {"z": 1, "a": [2]}, [3, 1]]
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=H,
                    id=f"h-{n + i}",
                    content=f"fact \x7f{n + i} \u00e9",
                    payload=payloads[(n + i) % len(payloads)],
                    confidence=0.25 + i / 10,
                    provenance=self.name,
                    evidence=("seeds/start",) if i else (),
                )
                for i in range(3)
            ]
        )


def seed() -> ProposedFact:
    return ProposedFact(key=ContextKey.SEEDS, id="start", content="go", provenance="me")


def entry_facts(entries: list[str]) -> list[dict[str, object]]:
    return [fact for entry in entries for fact in json.loads(entry)["facts"]]


def test_entries_from_the_seal_are_the_checked_records_and_skip_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    record_json = checkpoints.record_json

    def counted(fact: Fact, leaf: bytes) -> str | None:
        checked.append(fact.id)
        return record_json(fact, leaf)

    monkeypatch.setattr(checkpoints, "record_json", counted)
    store = Entries(SqliteRunStore(str(tmp_path / "runs.db")))
    engine = Engine(store=store, signing_key=KEY)
    engine.register_suggestor(Varied())
    result = engine.run_sync(inputs=[seed()])
    assert result.stop_reason is StopReason.CONVERGED
    monkeypatch.setattr(checkpoints, "record_json", record_json)
    records, problem = fact_records(result.context)
    assert problem is None
    written = entry_facts(store.entries)
    assert written == [json.loads(text) for text in fact_texts(result.context) or ()]
    assert [CycleDelta.model_validate_json(e).facts for e in store.entries] == [
        tuple(r for r in records if r.promotion.cycle == cycle) for cycle in range(4)
    ]
    # only the facts with an object or array payload were written from the fact again
    assert sorted(checked) == sorted(r.id for r in records if isinstance(r.payload, dict | list))
    assert len(checked) == 3  # h-3, h-4, h-8
    assert all(store.signed)


class Tamperer:
    """A semantic invariant that changes `hypotheses/h` below the API once it is promoted:
    after its seal, before the save of its cycle."""

    name = "tamperer"
    invariant_class = InvariantClass.SEMANTIC

    def check(self, ctx: Context, /) -> InvariantResult:
        fact = ctx.find(H, "h")
        if fact is not None and fact.content == "As promoted.":
            dict[str, Any].__setitem__(vars(fact), "content", "Changed.")
        return InvariantResult.ok()


class Once:
    name = "once"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(H)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(key=H, id="h", content="As promoted.", provenance=self.name, payload=1)
        )


def test_a_fact_changed_before_its_save_is_saved_as_promoted_and_ends_the_run(
    tmp_path: Path,
) -> None:
    store = Entries(SqliteRunStore(str(tmp_path / "runs.db")))
    engine = Engine(store=store, signing_key=KEY)
    engine.register_suggestor(Once())
    engine.register_invariant(Tamperer())
    result = engine.run_sync(inputs=[seed()])
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.detail.startswith("integrity: ")
    assert not verify(result.context, result.integrity)
    [saved] = [f for f in entry_facts(store.entries) if f["id"] == "h"]
    assert saved["content"] == "As promoted."  # the entry holds what was promoted
    restore_fact(CycleDelta.model_validate_json(json.dumps({"facts": [saved]})).facts[0])
    loaded = anyio.run(store.load, result.run_id)
    assert (loaded.stop_reason, loaded.signature) == (StopReason.INVARIANT_VIOLATED, None)


def sealed(count: int, first: int = 0) -> tuple[ContextSnapshot, Texts]:
    """Facts `h-{first}` on, promoted at clocks `first` on with their texts kept, in a context."""
    texts: Texts = {}
    stamp = Stamp("s", 0, "engine", None)
    facts = [
        stamp.promote(ProposedFact(key=H, id=f"h-{n}", content="c", provenance="p"), 1, n, texts)
        for n in range(first, first + count)
    ]
    leaves = [f.__dict__["digest"] for f in facts]
    snapshot = ContextSnapshot.empty()._extend(facts, leaves, 1, first + count - 1)  # pyright: ignore[reportPrivateUsage]
    return snapshot, texts


def test_a_kept_text_whose_leaf_is_not_the_one_the_context_kept_is_not_used() -> None:
    snapshot, texts = sealed(3, first=1)
    leaves = [f.__dict__["digest"] for f in snapshot.facts()]
    checked = fact_texts(snapshot)
    assert fact_texts(snapshot, None, texts) == checked
    text, leaf, witness = texts[H, "h-1"]
    forged = text.replace('"c"', '"forged"')
    texts[H, "h-1"] = (forged, bytes(bytearray(leaf)), witness)  # an equal leaf, not the one
    assert fact_texts(snapshot, None, texts) == checked
    texts[H, "h-2"] = (text, leaves[1], None)  # h-1's text, h-2's very leaf: no seal pairs them
    assert fact_texts(snapshot, None, texts) != checked  # what the identity trusts, shown


def test_a_rolled_back_fact_leaves_no_text() -> None:
    texts: Texts = {}
    merger = Merger(
        ContextSnapshot.empty(),
        cycle=1,
        gate=Gate(PromotionPolicy(), kind="engine", refused=frozenset()),
        mode="stop",
        texts=texts,
    )
    first = [ProposedFact(key=H, id="x", content="x", provenance="p")]
    assert merger.merge("a", 1, None, first) is None
    clash = [
        ProposedFact(key=H, id="y", content="y", provenance="p"),
        ProposedFact(key=H, id="x", content="not x", provenance="p"),
    ]
    assert merger.merge("b", 2, None, clash) is not None  # b's effect rolled back whole
    assert set(texts) == {(H, "x")}


def test_the_saver_empties_the_texts_once_the_store_took_them(tmp_path: Path) -> None:
    state = RunState.start(ContextSnapshot.empty(), ())
    state.texts = {}
    merger = Merger(
        state.snapshot,
        cycle=1,
        gate=Gate(PromotionPolicy(), kind="engine", refused=frozenset()),
        mode="reject",
        texts=state.texts,
    )
    assert (
        merger.merge("a", 1, None, [ProposedFact(key=H, id="x", content="x", provenance="p")])
        is None
    )
    assert merger.merge("a", 1, None, [seed()]) is None
    state.snapshot, state.cycle = merger.snapshot(), 1
    assert len(state.texts) == 2
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    journal = Journal(state.run_id, ((), ()), name=None, formation=None, key=KEY)
    saver = CycleSaver(store, journal, version=0, lease=9.0)
    anyio.run(saver.saved, state, 0.0)
    assert state.texts == {}
    assert sorted(f.id for f in anyio.run(store.load, state.run_id).facts) == ["start", "x"]
