"""A run saved as rows after every cycle ends by comparing each fact with its witness: the
very values its seal hashed. Whatever changes a fact's fields below the API, by value or by
an equal object that writes otherwise, still ends the run on integrity; an equal text put in
place of a text changes nothing; and a fact without a witness is checked in full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import converge._core._integrity as integrity
from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    Fact,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    SqliteRunStore,
    StopReason,
)
from converge._core._checkpoint import fact_texts
from converge._core._integrity import changed
from converge._core._witness import Witness, Witnesses, as_sealed
from tests.converge.test_journal_texts import sealed

H = ContextKey.HYPOTHESES


class Three:
    """One fact a cycle, `h-0` to `h-2`; `h-1` with an object payload."""

    name = "three"
    dependencies = (ContextKey.SEEDS, H)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(H) < 3

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(H)
        payload: Any = {"b": 2, "a": [1]} if n == 1 else 1
        return AgentEffect.with_proposal(
            ProposedFact(
                key=H,
                id=f"h-{n}",
                content=f"fact {n}",
                payload=payload,
                confidence=0.0 if n == 2 else 1.0,
                provenance=self.name,
                evidence=("seeds/start",),
            )
        )


def _equal_copy(text: str) -> str:
    copied = "".join(list(text))
    assert copied == text
    assert copied is not text
    return copied


CHANGES: dict[str, tuple[str, str, object]] = {
    # fact id, field, the new value (a function of the old one)
    "another text": ("h-0", "content", "Changed."),
    "True for the payload 1": ("h-0", "payload", True),  # equal to 1, written `true`
    "1.0 for the payload 1": ("h-0", "payload", 1.0),
    "-0.0 for the confidence 0.0": ("h-2", "confidence", -0.0),  # equal, written `-0.0`
    "another id": ("h-2", "id", "h-9"),
    "the object payload changed in place": ("h-1", "payload", None),  # see `Tamperer`
}


class Tamperer:
    """Changes one fact below the API once the run has all three (after their saves)."""

    name = "tamperer"
    invariant_class = InvariantClass.SEMANTIC

    def __init__(self, ident: str, field: str, value: object) -> None:
        self.ident, self.field, self.value = ident, field, value
        self.done = False

    def check(self, ctx: Context, /) -> InvariantResult:
        fact = ctx.find(H, self.ident)
        if ctx.count(H) == 3 and fact is not None and not self.done:
            self.done = True
            own = vars(fact)
            if self.field == "payload" and self.ident == "h-1":
                dict[str, Any].__setitem__(own["payload"], "b", 3)
            else:
                dict[str, Any].__setitem__(own, self.field, self.value)
        return InvariantResult.ok()


def run(tmp_path: Path, *invariants: Tamperer) -> ConvergeResult:
    engine = Engine(store=SqliteRunStore(str(tmp_path / "runs.db")))
    engine.register_suggestor(Three())
    for invariant in invariants:
        engine.register_invariant(invariant)
    seed = ProposedFact(key=ContextKey.SEEDS, id="start", content="go", provenance="me")
    return engine.run_sync(inputs=[seed])


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_fact_changed_after_its_save_ends_the_run_on_integrity(
    tmp_path: Path, change: str
) -> None:
    ident, field, value = CHANGES[change]
    result = run(tmp_path, Tamperer(ident, field, value))
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.detail.startswith("integrity: ")
    assert f"{H.value}/{ident}" in result.detail  # named by what the context kept


def test_an_equal_text_in_place_of_a_text_is_no_change(tmp_path: Path) -> None:
    class Copier(Tamperer):
        def check(self, ctx: Context, /) -> InvariantResult:
            fact = ctx.find(H, "h-0")
            if ctx.count(H) == 3 and fact is not None and not self.done:
                self.done = True
                own = vars(fact)
                dict[str, Any].__setitem__(own, "content", _equal_copy(own["content"]))
            return InvariantResult.ok()

    result = run(tmp_path, Copier("h-0", "content", None))
    assert result.stop_reason is StopReason.CONVERGED


def test_the_end_check_writes_again_only_the_facts_without_a_witness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    unchanged = integrity.unchanged

    def counted(fact: Fact, leaf: bytes) -> bool:
        checked.append(fact.ref)
        return unchanged(fact, leaf)

    monkeypatch.setattr(integrity, "unchanged", counted)
    result = run(tmp_path)
    assert result.stop_reason is StopReason.CONVERGED
    assert checked == ["hypotheses/h-1"]  # its payload is an object: it has no witness


def test_witnesses_are_filed_at_each_facts_place_and_a_save_written_again_replaces_its_own() -> (
    None
):
    snapshot, texts = sealed(4)
    witnesses = Witnesses()
    assert fact_texts(snapshot, {H: 2}, texts, witnesses) is not None
    start, held = witnesses.span(H)
    assert start == 2
    assert [w is texts[H, f"h-{n}"][2] for n, w in enumerate(held, 2)] == [1, 1]
    assert fact_texts(snapshot, {H: 2}, texts, witnesses) is not None  # the same save again
    assert witnesses.span(H)[0] == 2
    assert len(witnesses.span(H)[1]) == 2
    assert fact_texts(snapshot, {H: 1}, {}, witnesses) is not None  # written from the facts
    assert witnesses.span(H) == (1, [None, None, None])  # starts anew where it begins
    assert changed(snapshot, witnesses) is None


def test_a_witness_holds_only_for_the_very_objects_and_the_kept_leaf() -> None:
    snapshot, texts = sealed(1)
    [fact] = snapshot.facts()
    leaf = fact.__dict__["digest"]
    witness: Witness | None = texts[H, "h-0"][2]
    assert witness is not None
    assert as_sealed(fact, leaf, witness)
    assert not as_sealed(fact, bytes(32), witness)  # another leaf
    assert not as_sealed(fact, leaf, witness[:-1])  # a field short
    assert not as_sealed(object(), leaf, witness)  # no fields at all
    equal = tuple(_equal_copy(v) if type(v) is str and len(v) > 1 else v for v in witness)
    assert not as_sealed(fact, leaf, equal)  # equal values, other objects: checked in full
