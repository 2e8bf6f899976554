"""Integrity: known answers for the hashing rules, and verify."""

import hashlib
import json
import unicodedata
from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    Engine,
    Fact,
    IntegrityProof,
    PromotionPolicy,
    ProposedFact,
    verify,
)
from converge._core import _seal
from converge._core._canonical import EMPTY_ROOT, merkle_root
from converge._core._checkpoint import FactRecord, fact_records, fact_texts
from converge._core._integrity import changed, changed_since
from converge._core._key import STORED
from converge._core._seal import fact_digest, record_json
from converge._kernel._gate import Gate
from converge._kernel._merge import Merger
from tests.doubles import ProposesOnce
from tests.doubles import fact as proposal


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def test_merkle_root_of_no_leaves_is_sha256_of_empty_string() -> None:
    assert merkle_root([]) == hashlib.sha256(b"").hexdigest() == EMPTY_ROOT


def test_merkle_root_of_one_leaf_is_the_leaf() -> None:
    leaf = h(b"\x00x")
    assert merkle_root([leaf]) == leaf.hex()


def test_merkle_root_of_two_leaves_hashes_with_node_prefix() -> None:
    a, b = h(b"\x00a"), h(b"\x00b")
    assert merkle_root([a, b]) == h(b"\x01" + a + b).hex()


def test_merkle_root_carries_an_odd_node_up_unchanged() -> None:
    a, b, c = h(b"\x00a"), h(b"\x00b"), h(b"\x00c")
    assert merkle_root([a, b, c]) == h(b"\x01" + h(b"\x01" + a + b) + c).hex()


def level_by_level(leaves: list[bytes]) -> str:
    """The tree as the integrity rules state it: pairs per level, an odd last node goes up."""
    level = leaves
    while len(level) > 1:
        paired = [h(b"\x01" + level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + level[-1:] if len(level) % 2 else paired
    return level[0].hex()


@given(st.integers(min_value=1, max_value=5000) | st.sampled_from([1023, 1024, 1025, 2048, 3073]))
def test_merkle_root_streamed_in_blocks_is_the_level_by_level_tree(count: int) -> None:
    # merkle_root hashes 1,024-leaf blocks as they stream in; the tree must not depend on it
    leaves = [h(b"\x00" + str(index).encode()) for index in range(count)]
    assert merkle_root(iter(leaves)) == level_by_level(leaves)


def canonical(fact_fields: dict[str, object]) -> bytes:
    return json.dumps(
        fact_fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def test_fact_digest_matches_an_independent_computation() -> None:
    proposal = ProposedFact(
        key=ContextKey.SEEDS,
        id="é1",
        content="naïve",
        provenance="input:crm",
        payload={"b": [1, 2.5], "a": None},
        confidence=0.75,
        evidence=("seeds/x",),
    )
    result = Engine().run_sync(inputs=[proposal])
    fact = result.context.find(ContextKey.SEEDS, "é1")
    assert fact is not None
    expected = canonical(
        {
            "key": "seeds",
            "id": "é1",
            "content": "naïve",
            "payload": {"b": [1, 2.5], "a": None},
            "confidence": 0.75,
            "provenance": "input:crm",
            "target": None,
            "evidence": ["seeds/x"],
            "promotion": {
                "cycle": 0,
                "suggestor": "input",
                "suggestor_id": -1,
                "clock": 1,
                "gate": "input",
                "approved_by": None,
            },
        }
    )
    assert fact.digest == h(b"\x00" + expected).hex()
    assert result.integrity.merkle_root == fact.digest


def _independent_digest(fact: Fact) -> str:
    record = fact.promotion
    fields: dict[str, object] = {
        "key": fact.key.value,
        "id": fact.id,
        "content": fact.content,
        "payload": fact.payload,
        "confidence": fact.confidence,
        "provenance": fact.provenance,
        "target": None if fact.target is None else fact.target.value,
        "evidence": list(fact.evidence),
        "promotion": record.model_dump(),
    }
    return h(b"\x00" + canonical(fields)).hex()


def test_every_digest_of_repeated_runs_matches_an_independent_computation() -> None:
    # A suggestor's promotion record text is written once and kept from run to run (only
    # the cycle and clock change): each run's facts, in later cycles and from a continued
    # context, still hash exactly as their fields say.
    first = ProposesOnce("first", [proposal(ContextKey.HYPOTHESES, "h1", "one")])
    later = ProposesOnce("later", [proposal(ContextKey.HYPOTHESES, "h2", "two")], at=2)
    engine = Engine()
    engine.register_suggestor(first)
    engine.register_suggestor(later)
    one = engine.run_sync(inputs=[proposal(ContextKey.SEEDS, "s", "seed")])
    again = engine.run_sync(
        ContextSnapshot.empty(), inputs=[proposal(ContextKey.SEEDS, "t", "other seed")]
    )
    first.proposals = (proposal(ContextKey.HYPOTHESES, "h3", "three"),)
    continued = engine.run_sync(one.context)
    records: set[tuple[str, int, int]] = set()
    for result in (one, again, continued):
        assert verify(result.context, result.integrity)
        for promoted in result.context.facts():
            assert promoted.digest == _independent_digest(promoted) == fact_digest(promoted).hex()
            record = promoted.promotion
            records.add((record.suggestor, record.cycle, record.clock))
    assert records >= {("first", 1, 2), ("later", 2, 3), ("first", 1, 4)}


def digest_of(ident: str, content: str, provenance: str = "p") -> str:
    proposal = ProposedFact(key=ContextKey.SEEDS, id=ident, content=content, provenance=provenance)
    fact = Engine().run_sync(inputs=[proposal]).context.find(ContextKey.SEEDS, ident)
    assert fact is not None
    return fact.digest


def test_digest_has_no_delimiter_ambiguity() -> None:
    assert digest_of("a|b", "c") != digest_of("a", "b|c")


def test_provenance_changes_the_digest() -> None:
    assert digest_of("a", "c", "one") != digest_of("a", "c", "two")


def test_verify_accepts_the_result_of_a_run() -> None:
    inputs = [
        ProposedFact(key=key, id=f"f{i}", content=f"c{i}", provenance="t")
        for i, key in enumerate([ContextKey.HYPOTHESES, ContextKey.SEEDS, ContextKey.SEEDS])
    ]
    result = Engine().run_sync(inputs=inputs)
    assert verify(result.context, result.integrity)
    assert result.integrity.fact_count == 3
    assert result.integrity.clock == 3


def test_verify_refuses_a_proof_with_another_root_count_or_clock() -> None:
    result = Engine().run_sync(
        inputs=[ProposedFact(key=ContextKey.SEEDS, id="a", content="c", provenance="t")]
    )
    proof = result.integrity
    for forged in (
        IntegrityProof(merkle_root=EMPTY_ROOT, clock=proof.clock, fact_count=proof.fact_count),
        IntegrityProof(merkle_root=proof.merkle_root, clock=proof.clock, fact_count=2),
        IntegrityProof(merkle_root=proof.merkle_root, clock=7, fact_count=proof.fact_count),
    ):
        assert not verify(result.context, forged)


def test_facts_are_hashed_in_key_order_then_insertion_order() -> None:
    inputs = [
        ProposedFact(key=ContextKey.DIAGNOSTIC, id="d", content="c", provenance="t"),
        ProposedFact(key=ContextKey.SEEDS, id="s2", content="c", provenance="t"),
        ProposedFact(key=ContextKey.SEEDS, id="s1", content="c", provenance="t"),
    ]
    result = Engine().run_sync(inputs=inputs)
    facts = result.context.facts()
    assert [f.ref for f in facts] == ["seeds/s2", "seeds/s1", "diagnostic/d"]
    assert result.integrity.merkle_root == merkle_root(bytes.fromhex(f.digest) for f in facts)


texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30
).filter(lambda text: text.strip() != "")
idents = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N", "P", "S")), min_size=1, max_size=20
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


fields = {
    "ident": idents,
    "content": texts,
    "provenance": texts,
    "payload": json_values,
    "confidence": st.floats(min_value=0.0, max_value=1.0),
    "evidence": st.lists(texts, max_size=3),
    "staged": st.booleans(),
}
"""Any one proposal's fields (`one_proposal`'s)."""


def one_proposal(
    ident: str,
    content: str,
    provenance: str,
    payload: JsonValue,
    confidence: float,
    evidence: list[str],
    staged: bool,
) -> ProposedFact:
    """A seed, or with `staged` a proposal for the hypotheses, with these fields."""
    return ProposedFact(
        key=ContextKey.PROPOSALS if staged else ContextKey.SEEDS,
        target=ContextKey.HYPOTHESES if staged else None,
        id=ident,
        content=content,
        provenance=provenance,
        payload=payload,
        confidence=confidence,
        evidence=tuple(evidence),
    )


@given(**fields)
def test_fact_digest_always_matches_json_dumps_of_its_fields(
    ident: str,
    content: str,
    provenance: str,
    payload: JsonValue,
    confidence: float,
    evidence: list[str],
    staged: bool,
) -> None:
    """The fast field-by-field encoder is byte-identical to the documented json.dumps rule."""
    proposal = one_proposal(ident, content, provenance, payload, confidence, evidence, staged)
    result = Engine().run_sync(inputs=[proposal])
    [fact] = result.context.facts() or [None]
    assert fact is not None, result.rejections
    expected = canonical(
        {
            "key": fact.key.value,
            "id": unicodedata.normalize("NFC", ident),  # ids are stored in NFC
            "content": content,
            "payload": fact.payload,
            "confidence": confidence,
            "provenance": provenance,
            "target": "hypotheses" if staged else None,
            "evidence": evidence,
            "promotion": fact.promotion.model_dump(),
        }
    )
    assert fact.digest == h(b"\x00" + expected).hex()


@given(proposal=st.builds(one_proposal, **fields))
def test_a_facts_json_in_a_journal_entry_reads_back_as_the_record_of_the_fact(
    proposal: ProposedFact,
) -> None:
    """A journal entry holds each fact's JSON as the leaf's text gives it (`fact_texts`),
    not a dumped `FactRecord`: a reader must get the very record `fact_records` builds."""
    context = Engine().run_sync(inputs=[proposal]).context
    records, problem = fact_records(context)
    texts = fact_texts(context)
    assert problem is None
    assert texts is not None
    assert len(texts) == len(records) == 1
    read = FactRecord.model_validate_json(texts[0], context=STORED)
    assert read == records[0]
    assert read.model_dump_json() == records[0].model_dump_json()
    assert json.loads(texts[0])["digest"] == records[0].digest


def test_a_fact_changed_below_the_api_has_no_entry_json() -> None:
    context = Engine().run_sync(inputs=[proposal(ContextKey.SEEDS, "s", "seed")]).context
    [fact] = context.facts()
    leaf = bytes.fromhex(fact.digest)
    assert record_json(fact, leaf) is not None
    assert record_json(fact, bytes(32)) is None  # another leaf
    for field, value in [("content", "forged"), ("confidence", 1), ("id", None)]:
        was = vars(fact)[field]
        dict[str, object].__setitem__(vars(fact), field, value)
        assert record_json(fact, leaf) is None, field
        assert fact_texts(context) is None
        dict[str, object].__setitem__(vars(fact), field, was)
    assert fact_texts(context) is not None


@pytest.mark.parametrize("size", [1, 6])  # one fact, and an effect of several
def test_a_promoter_named_with_format_characters_seals_what_verify_recomputes(size: int) -> None:
    # the leaf text is written with %-formatting: names holding % must come out exactly as
    # verify writes them from the fact, and as an independent json.dumps does
    gate = Gate(PromotionPolicy(), kind="human")
    merger = Merger(ContextSnapshot.empty(), cycle=1, gate=gate, mode="stop")
    proposals = [
        ProposedFact(key=ContextKey.SEEDS, id=f"p{n}", content="100%", provenance="%s")
        for n in range(size)
    ]
    merger.merge("50% off %s %d", 7, None, proposals, approved_by="ana %d%%")
    assert len(merger.promoted) == size
    for clock, fact in enumerate(merger.promoted, start=1):
        assert (fact.promotion.suggestor, fact.promotion.approved_by) == (
            "50% off %s %d",
            "ana %d%%",
        )
        assert fact.digest == fact_digest(fact).hex()
        record: dict[str, object] = {
            "key": "seeds",
            "id": fact.id,
            "content": "100%",
            "payload": None,
            "confidence": 1.0,
            "provenance": "%s",
            "target": None,
            "evidence": [],
            "promotion": {
                "cycle": 1,
                "suggestor": "50% off %s %d",
                "suggestor_id": 7,
                "clock": clock,
                "gate": "human",
                "approved_by": "ana %d%%",
            },
        }
        assert fact.digest == h(b"\x00" + canonical(record)).hex()


class _Shifty(str):
    """A name that claims to equal, and hash like, every other."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class _Named:
    dependencies = ()

    def __init__(self, name: str, ident: str) -> None:
        self.name = _Shifty(name)
        self._ident = ident

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.SEEDS, f"{self._ident}0") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        # six facts in one effect, all recorded under this suggestor's own name
        return AgentEffect.with_proposals(
            ProposedFact(key=ContextKey.SEEDS, id=f"{self._ident}{n}", content="c", provenance="p")
            for n in range(6)
        )


def test_suggestor_names_that_claim_to_equal_each_other_seal_their_own_names() -> None:
    engine = Engine()
    engine.register_suggestor(_Named("first", "a"))
    engine.register_suggestor(_Named("second", "b"))
    result = engine.run_sync()
    names = {fact.id[0]: fact.promotion.suggestor for fact in result.context.facts()}
    assert names == {"a": "first", "b": "second"}
    assert len(result.context) == 12
    assert all(type(name) is str for name in names.values())
    assert verify(result.context, result.integrity)


def _expected_proof(context: ContextSnapshot) -> tuple[str, int, int]:
    """Root, clock and count of `context`, recomputed from each fact's fields alone."""
    facts = context.facts()
    leaves = [bytes.fromhex(_independent_digest(fact)) for fact in facts]
    clock = max((fact.promotion.clock for fact in facts), default=0)
    return merkle_root(leaves), clock, len(facts)


def test_a_proof_first_read_after_its_context_was_continued_twice_is_still_its_own() -> None:
    # The proof is built on its first read, from the leaves the context kept: two runs that
    # continue from the same context (the second forks the line the first extended) must not
    # change what the first run's proof, or its trace's final root, says.
    grower = ProposesOnce(
        "grower", [proposal(ContextKey.HYPOTHESES, f"h{i}", "x") for i in range(5)]
    )
    engine = Engine()
    engine.register_suggestor(grower)
    first = engine.run_sync(inputs=[proposal(ContextKey.SEEDS, "s", "seed")])
    grower.proposals = (proposal(ContextKey.HYPOTHESES, "later", "one"),)
    one = engine.run_sync(first.context)
    grower.proposals = (proposal(ContextKey.HYPOTHESES, "fork", "two"),)
    two = engine.run_sync(first.context)
    assert len(one.context) == len(two.context) == len(first.context) + 1
    for result in (first, one, two):
        proof = result.integrity
        assert (proof.merkle_root, proof.clock, proof.fact_count) == _expected_proof(result.context)
        assert result.trace.final_root == proof.merkle_root
        assert verify(result.context, proof)
    assert first.integrity is first.integrity  # built once, then kept


def test_runs_whose_proofs_nobody_reads_hash_no_merkle_tree_not_even_when_continued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import converge._core._context

    roots: list[int] = []

    def counted(leaves: Iterable[bytes]) -> str:
        kept = list(leaves)
        roots.append(len(kept))
        return merkle_root(kept)

    monkeypatch.setattr(converge._core._context, "merkle_root", counted)
    engine = Engine()
    first = engine.run_sync(inputs=[proposal(ContextKey.SEEDS, f"s{i}", "seed") for i in range(3)])
    more = [proposal(ContextKey.SEEDS, f"t{i}", "more") for i in range(2)]
    second = engine.run_sync(first.context, inputs=more)
    third = engine.run_sync(second.context, inputs=[proposal(ContextKey.SEEDS, "u", "last")])
    assert roots == []  # three runs, two of them continued: no tree hashed yet
    assert third.trace.initial_root == second.integrity.merkle_root
    assert roots == [5, 6]  # the third's origin (the second's context) and its last snapshot
    assert third.integrity.merkle_root == third.trace.final_root
    assert second.trace.initial_root == first.integrity.merkle_root
    assert first.trace.initial_root == EMPTY_ROOT
    assert roots == [5, 6, 3, 0]  # each context's root hashed once, on its first read
    for result in (first, second, third):
        proof = result.integrity
        assert (proof.merkle_root, proof.clock, proof.fact_count) == _expected_proof(result.context)


def _forge(context: ContextSnapshot, ident: str) -> None:
    """Below the API: rewrite a fact's content, and its digest and kept leaf to match."""
    store = context._stores[ContextKey.SEEDS]  # pyright: ignore[reportPrivateUsage]
    at = [f.id for f in store.facts].index(ident)
    fact = store.facts[at]
    dict[str, object].__setitem__(vars(fact), "content", "forged")
    digest = fact_digest(fact)
    dict[str, object].__setitem__(vars(fact), "digest", digest)
    store.leaves[at] = digest


def test_a_proof_read_at_the_runs_end_still_catches_a_fact_forged_with_its_leaf_later() -> None:
    # The proof commits to the leaves as they are when it is first read (documented):
    # read at the run's end, it catches a fact and its kept leaf rewritten together later.
    inputs = [proposal(ContextKey.SEEDS, f"s{i}", "seed") for i in range(3)]
    early = Engine().run_sync(inputs=inputs)
    proof = early.integrity
    _forge(early.context, "s1")
    assert early.context.find(ContextKey.SEEDS, "s1").content == "forged"  # pyright: ignore[reportOptionalMemberAccess]
    assert not verify(early.context, proof)
    late = Engine().run_sync(inputs=inputs)
    _forge(late.context, "s1")
    assert verify(late.context, late.integrity)  # the limit: a first read after the forgery


class _Claims(str):
    """A text that claims to equal, and hash as, another value than the text it holds."""

    __slots__ = ("_claimed",)
    _claimed: object

    def __new__(cls, value: str, claimed: object) -> "_Claims":
        made = super().__new__(cls, value)
        made._claimed = claimed
        return made

    def __eq__(self, other: object) -> bool:
        return other == self._claimed

    def __hash__(self) -> int:
        return hash(self._claimed)


def _set_promotion(fact: Fact, field: int, value: object) -> None:
    """Below the API: one value of a fact's promotion record."""
    values = list(vars(fact)["promotion"])
    values[field] = value
    dict[str, object].__setitem__(vars(fact), "promotion", tuple(values))


@pytest.mark.parametrize("field", [1, 4, 5])  # the suggestor, the gate, the approver
def test_a_promotion_text_that_claims_to_equal_the_original_is_still_found_changed(
    field: int,
) -> None:
    # `fact_digest` keeps promotion texts by their fields: a text subclass that compares
    # equal to the original must not be given the original's text.
    inputs = [proposal(ContextKey.SEEDS, f"s{i}", "seed") for i in range(2)]
    result = Engine().run_sync(inputs=inputs)
    assert changed(result.context) is None  # the original's texts are kept now
    fact = result.context.facts()[1]
    _set_promotion(fact, field, _Claims("someone else", vars(fact)["promotion"][field]))
    assert fact_digest(fact) != bytes.fromhex(fact.digest)
    assert changed(result.context) == changed_since(ContextKey.SEEDS, "s1")


def test_facts_of_more_promoters_than_the_kept_texts_still_digest_their_own() -> None:
    # the kept promotion texts are emptied when full, never given to another record
    context = Engine().run_sync(inputs=[proposal(ContextKey.SEEDS, "s", "seed")]).context
    fact = context.facts()[0]
    for n in [*range(5_000), 7, 4_999, 4_096, 0]:
        _set_promotion(fact, 1, f"promoter-{n}")
        assert fact_digest(fact).hex() == _independent_digest(fact)
    assert len(_seal._TEXTS) <= 4_096  # pyright: ignore[reportPrivateUsage]
