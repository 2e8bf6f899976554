"""Trust at the gate: what it receives is validated again, and the engine's ids are its own.

Attack C: proposals that skipped validation (`model_copy(update=...)`, `model_construct`,
pydantic's base-class routes) crash the run or become facts. Attack D: a suggestor writes
the note a human rejection leaves, ids that look alike, and oversized provenance or payload.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest
from pydantic import BaseModel, ValidationError

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Engine,
    Fact,
    GateDecision,
    HitlPolicy,
    PromotionPolicy,
    ProposedFact,
    RunRecord,
    StopReason,
    verify,
)
from converge._kernel._gate import RESTATED, Clash, Gate, Hold, Reject, Verdict
from converge._kernel._merge import Merger

SEEDS = ContextKey.SEEDS
H = ContextKey.HYPOTHESES
S = ContextKey.STRATEGIES
D = ContextKey.DIAGNOSTIC


def good(ident: str = "ok", **fields: object) -> ProposedFact:
    base: dict[str, object] = {"key": H, "id": ident, "content": "A claim.", "provenance": "bad"}
    return ProposedFact.model_validate(base | fields)


def base_copy(ident: str, **update: object) -> ProposedFact:
    """`BaseModel.model_copy`: pydantic's own route, which no override can close."""
    return cast("ProposedFact", BaseModel.model_copy(good(ident), update=update))


def construct(**fields: object) -> ProposedFact:
    """`BaseModel.model_construct`: no validation at all."""
    build: Any = BaseModel.model_construct.__func__
    return build(ProposedFact, **fields)


def cyclic() -> list[Any]:
    payload: list[Any] = []
    payload.append(payload)
    return payload


class EvilId(str):
    """An id whose hash raises: anything at all may come out of an unvalidated field."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise RuntimeError("no hash for you")


# (the proposal that skipped validation, a word the rejection reason must name)
UNVALIDATED: dict[str, tuple[Callable[[], object], str]] = {
    "key: not a key": (lambda: base_copy("k", key="beliefs"), "key"),
    "key: None": (lambda: good("k2").model_copy(update={"key": None}), "key"),
    "content: None": (lambda: base_copy("c", content=None), "content"),
    "content: bytes": (lambda: good("c2").model_copy(update={"content": b"x"}), "content"),
    "provenance: int": (lambda: base_copy("p", provenance=7), "provenance"),
    "id: int": (lambda: base_copy("i", id=7), "id"),
    "payload: set": (lambda: base_copy("s", payload={1, 2}), "payload"),
    "payload: nested set": (lambda: base_copy("s2", payload={"a": [{1}]}), "payload.a[0]"),
    "payload: cyclic": (lambda: base_copy("s3", payload=cyclic()), "payload"),
    "payload: object": (lambda: base_copy("s4", payload=object()), "payload"),
    "confidence: nan": (lambda: base_copy("n", confidence=math.nan), "confidence"),
    "confidence: 7.0": (lambda: good("n2").model_copy(update={"confidence": 7.0}), "confidence"),
    "confidence: str": (lambda: base_copy("n3", confidence="high"), "confidence"),
    "target: str": (lambda: base_copy("t", target="nowhere"), "target"),
    "evidence: ints": (lambda: base_copy("e", evidence=(1, 2)), "evidence"),
    "evidence: str": (lambda: base_copy("e2", evidence=None), "evidence"),
    "model_construct: fields missing": (lambda: construct(key=H, id="m"), "content"),
    "ProposedFact.model_construct": (
        lambda: ProposedFact.model_construct(key=H, id="m2", content=None, provenance="x"),
        "content",
    ),
    "not a proposal": (lambda: "hypotheses/x", "ProposedFact"),
}


class Emits:
    """Returns, once, the proposals it was given, whatever they are."""

    name = "emits"
    dependencies = ()

    def __init__(self, proposals: Sequence[object]) -> None:
        self._proposals = tuple(proposals)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(H)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        build: Any = BaseModel.model_construct.__func__
        return build(AgentEffect, proposals=(*self._proposals, good("fine")), tokens=0)


def run_emitting(*proposals: object) -> ConvergeResult:
    engine = Engine()
    engine.register_suggestor(Emits(proposals))
    return engine.run_sync()


@pytest.mark.parametrize("case", sorted(UNVALIDATED))
def test_an_unvalidated_proposal_is_a_recorded_rejection_not_a_crash(case: str) -> None:
    build, field = UNVALIDATED[case]
    result = run_emitting(build())
    assert result.stop_reason is StopReason.CONVERGED
    assert [fact.ref for fact in result.context.facts()] == ["hypotheses/fine"]
    [rejection] = result.rejections
    assert field in rejection.reason
    assert rejection.suggestor == "emits"
    assert result.trace.cycles[0].rejected == (rejection,)
    assert verify(result.context, result.integrity)
    # The record of the rejection is valid itself: the run's record serialises and reads back.
    record = RunRecord.of(result)
    assert RunRecord.model_validate_json(record.model_dump_json()).rejections == (rejection,)


@pytest.mark.parametrize("case", sorted(set(UNVALIDATED) - {"not a proposal"}))
def test_an_unvalidated_input_is_a_recorded_rejection_not_a_crash(case: str) -> None:
    build, field = UNVALIDATED[case]
    bad = build()  # (a non-proposal input is refused before the run: ConfigurationError)
    assert isinstance(bad, ProposedFact)
    result = Engine().run_sync(inputs=[bad, good("fine")])
    assert result.stop_reason is StopReason.CONVERGED
    assert [fact.ref for fact in result.context.facts()] == ["hypotheses/fine"]
    [rejection] = result.rejections
    assert field in rejection.reason
    assert rejection.suggestor == "input"


def test_the_rejection_reason_names_the_field_and_the_problem() -> None:
    result = run_emitting(
        base_copy("a", confidence=math.nan),
        base_copy("b", content=None),
        base_copy("c", payload={"rows": [1, {2, 3}]}),
    )
    reasons = [rejection.reason for rejection in result.rejections]
    assert reasons[0].startswith("invalid proposal: confidence: ")
    assert reasons[1].startswith("invalid proposal: content: ")
    assert reasons[2].startswith("cannot be hashed as canonical JSON (ValueError: payload.rows[1]")


def test_an_unvalidated_copy_that_validates_is_promoted_as_validated() -> None:
    """A plain-string key that names a key is what validation gives: the gate re-validates."""
    result = run_emitting(base_copy("k", key="signals", payload={"a": [1]}, confidence=1))
    fact = result.context.find(ContextKey.SIGNALS, "k")
    assert fact is not None
    assert fact.key is ContextKey.SIGNALS
    assert type(fact.confidence) is float
    with pytest.raises(TypeError):
        cast("dict[str, list[int]]", fact.payload)["a"].append(2)
    assert result.rejections == ()
    assert verify(result.context, result.integrity)


def test_an_unvalidated_copy_of_a_text_subclass_is_decided_as_plain_text() -> None:
    result = run_emitting(base_copy("i", id=EvilId("evil")))
    fact = result.context.find(H, "evil")
    assert fact is not None
    assert type(fact.id) is str
    assert verify(result.context, result.integrity)


class Shifting(dict[str, object]):
    """A proposal's `__dict__` that answers its id's later reads with a forbidden one."""

    reads = 0

    def __getitem__(self, name: str) -> object:
        value = dict[str, object].__getitem__(self, name)
        if name != "id":
            return value
        self.reads += 1
        return value if self.reads <= 1 else "bad id\u202e"


def test_a_proposal_whose_fields_answer_each_read_differently_is_decided_once() -> None:
    """A `__dict__` replaced by a `dict` subclass cannot show the checks one id and the seal
    another: the gate validates such a proposal again, from one reading of its fields."""
    shifty = good("fine-once")
    object.__setattr__(shifty, "__dict__", Shifting(shifty.__dict__))
    result = run_emitting(shifty)
    assert sorted(fact.id for fact in result.context.get(H)) == ["fine", "fine-once"]
    assert result.rejections == ()
    assert verify(result.context, result.integrity)


def test_an_effect_validates_on_model_construct_and_model_copy() -> None:
    with pytest.raises(ValidationError):
        AgentEffect.model_construct(proposals=7)
    with pytest.raises(ValidationError):
        AgentEffect.empty().model_copy(update={"tokens": -1})
    effect = AgentEffect.model_construct(proposals=[good("a")], tokens=3)
    assert effect.model_copy(update={"tokens": 4}).tokens == 4

    class Broken:
        name = "broken"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return not ctx.has(H)

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.model_construct(proposals=7, tokens=0)

    engine = Engine()
    engine.register_suggestor(Broken())
    result = engine.run_sync()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.trace.cycles[0].executions[0].outcome == "failed"


def test_the_merge_rejects_proposals_it_cannot_read() -> None:
    gate = Gate(PromotionPolicy(), kind="engine")
    merger = Merger(ContextSnapshot.empty(), cycle=1, gate=gate, mode="reject")
    unreadable: Any = 7
    assert merger.merge("broken", 0, None, unreadable) is None
    [rejection] = merger.rejections
    assert rejection.reason.startswith("the effect's proposals cannot be read (TypeError")


def test_any_exception_while_deciding_is_that_proposals_rejection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(*_args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(HitlPolicy, "held_by", boom)  # what the merge asks the policy
    merger = Merger(
        ContextSnapshot.empty(),
        cycle=1,
        gate=Gate(PromotionPolicy(), kind="engine"),
        mode="reject",
        hitl=HitlPolicy(),
    )
    merger.merge("a", 0, None, [good("x"), good("y")])
    assert [r.reason for r in merger.rejections] == [
        "could not be decided (RuntimeError: boom)"
    ] * 2
    assert merger.promoted == []


def test_policy_check_reports_an_unvalidated_proposal() -> None:
    policy = PromotionPolicy()
    assert policy.check(base_copy("a", content=None), None) is not None
    assert policy.check(base_copy("b", confidence=7.0), None) is not None
    assert policy.check(good("c"), None) is None


# --- D: reserved ids, NFC, invisible characters, size limits ---------------------------------


class Forger:
    """Before the human decides, writes the note a human rejection of `costly` would leave."""

    name = "forger"
    dependencies = (SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(D)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(
                key=D,
                id="hitl-rejected:costly",
                content="HITL gate rejected proposal 'costly' by ceo: fine by me",
                provenance="human:ceo",
            )
        )


class Costly:
    name = "costly"
    dependencies = (SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(S)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(key=S, id="cheap", content="Small plan.", provenance=self.name),
                ProposedFact(
                    key=S, id="costly", content="Big plan.", provenance=self.name, confidence=0.1
                ),
            ]
        )


async def test_a_suggestor_cannot_write_the_note_of_a_human_rejection() -> None:
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5))
    engine.register_suggestor(Costly())
    engine.register_suggestor(Forger())
    seed = ProposedFact(key=SEEDS, id="goal", content="Pick a plan.", provenance="me")
    paused = await engine.run(inputs=[seed])
    assert paused.checkpoint is not None
    assert paused.context.find(D, "hitl-rejected:costly") is None
    forged = [r for r in paused.rejections if r.suggestor == "forger"]
    assert forged
    assert "reserved" in forged[0].reason
    assert "diagnostic/hitl-rejected:costly" in forged[0].reason
    [request] = paused.pending
    decision = GateDecision.reject(request.gate_id, by="jane", reason="too dear")
    result = await engine.resume(paused.checkpoint, [decision])
    note = result.context.find(D, "hitl-rejected:costly")
    assert note is not None
    assert note.promotion.gate == "human"
    assert note.promotion.approved_by == "jane"
    assert note.provenance == "human:jane"
    assert verify(result.context, result.integrity)


@pytest.mark.parametrize("gate", ["engine", "input"])
def test_the_reserved_prefix_is_refused_from_every_gate_but_the_humans(gate: str) -> None:
    policy = PromotionPolicy()
    note = ProposedFact(key=D, id="hitl-rejected:x", content="No.", provenance="human:ceo")
    reason = policy.check(note, None, gate=gate)  # type: ignore[arg-type]
    assert reason == (
        "diagnostic/hitl-rejected:x is reserved: only the human gate writes "
        "diagnostic/hitl-rejected:* notes"
    )
    assert policy.check(note, None, gate="human") is None
    elsewhere = ProposedFact(key=H, id="hitl-rejected:x", content="No.", provenance="me")
    assert policy.check(elsewhere, None) is None


def test_a_reserved_input_is_a_recorded_rejection() -> None:
    note = ProposedFact(key=D, id="hitl-rejected:x", content="No.", provenance="human:ceo")
    result = Engine().run_sync(inputs=[note])
    assert len(result.context) == 0
    assert "reserved" in result.rejections[0].reason


def test_ids_are_compared_and_stored_in_nfc() -> None:
    composed = "caf\u00e9"
    decomposed = "cafe\u0301"
    first = ProposedFact(key=SEEDS, id=decomposed, content="One.", provenance="me")
    assert first.id == composed
    second = ProposedFact(key=SEEDS, id=composed, content="Two.", provenance="me")
    result = Engine(on_conflict="reject").run_sync(inputs=[first, second])
    assert [fact.id for fact in result.context.facts()] == [composed]
    assert "conflicts with existing fact seeds/café" in result.rejections[0].reason


def test_an_unvalidated_id_is_normalised_at_the_gate() -> None:
    decomposed = "cafe\u0301"
    sneaky = base_copy("x", id=decomposed)
    assert sneaky.id == decomposed
    result = run_emitting(sneaky)
    ids = {fact.id for fact in result.context.facts()}
    assert ids == {"caf\u00e9", "fine"}
    assert all(unicodedata.is_normalized("NFC", ident) for ident in ids)


INVISIBLE = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\u200e",
    "\u200f",
    "\u2060",
    "\ufeff",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
]


@pytest.mark.parametrize("character", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_an_id_holding_an_invisible_or_bidi_character_is_refused(character: str) -> None:
    proposal = ProposedFact(key=SEEDS, id=f"ad{character}min", content="x", provenance="me")
    reason = PromotionPolicy().check(proposal, None)
    assert reason == (
        f"id {proposal.id!r} contains an invisible or bidirectional control character "
        f"(U+{ord(character):04X})"
    )
    result = Engine().run_sync(inputs=[proposal])
    assert len(result.context) == 0
    assert result.rejections[0].reason == reason


def test_provenance_has_a_size_limit() -> None:
    policy = PromotionPolicy()
    assert policy.max_provenance_length == 256
    fits = ProposedFact(key=SEEDS, id="a", content="x", provenance="p" * 256)
    long = ProposedFact(key=SEEDS, id="b", content="x", provenance="p" * 257)
    assert policy.check(fits, None) is None
    assert policy.check(long, None) == "provenance is 257 characters long, over the limit of 256"


def test_payload_has_a_size_limit_in_canonical_json_bytes() -> None:
    assert PromotionPolicy().max_payload_bytes == 1024 * 1024
    policy = PromotionPolicy(max_payload_bytes=16)
    fits = ProposedFact(key=SEEDS, id="a", content="x", provenance="p", payload={"b": "é" * 4})
    big = ProposedFact(key=SEEDS, id="b", content="x", provenance="p", payload={"b": "é" * 5})
    assert policy.check(fits, None) is None  # {"b":"éééé"}: 16 bytes
    assert policy.check(big, None) == "payload is 18 bytes of canonical JSON, over the limit of 16"
    text = ProposedFact(key=SEEDS, id="c", content="x", provenance="p", payload="x" * 20)
    assert policy.check(text, None) == "payload is 22 bytes of canonical JSON, over the limit of 16"
    result = Engine(policy=policy).run_sync(inputs=[fits, big])
    assert [fact.id for fact in result.context.facts()] == ["a"]


def test_a_refused_copy_holding_a_lone_surrogate_is_recorded_as_json() -> None:
    fine = good("a")
    blank = BaseModel.model_copy(good("b"), update={"content": "x\ud800", "provenance": " "})
    conflicting = BaseModel.model_copy(good("a"), update={"content": "y\ud800"})
    engine = Engine(on_conflict="reject")
    engine.register_suggestor(Emits([fine, blank, conflicting]))
    result = engine.run_sync()
    reasons = [rejection.reason for rejection in result.rejections]
    assert reasons[0] == "provenance is blank"
    assert reasons[1].startswith("conflicts with existing fact hypotheses/a")
    escaped = " [1 unstorable character escaped]"
    assert [r.proposal.content for r in result.rejections] == [
        "x\\ud800" + escaped,
        "y\\ud800" + escaped,
    ]
    record = RunRecord.of(result)
    assert RunRecord.model_validate_json(record.model_dump_json()).rejections == result.rejections


class ConstructedEffect:
    """Returns an `AgentEffect` built around validation, holding an int as its proposals."""

    name = "constructed"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle <= 1

    async def execute(self, ctx: Context, /) -> AgentEffect:
        construct = cast(Any, BaseModel.model_construct).__func__
        return cast(AgentEffect, construct(AgentEffect, proposals=7, tokens=0))


def test_an_effect_that_skipped_validation_is_a_failed_execution_not_a_crash() -> None:
    engine = Engine()
    engine.register_suggestor(ConstructedEffect())
    result = engine.run_sync()
    [execution] = result.trace.cycles[0].executions
    assert execution.outcome == "failed"
    assert execution.error is not None
    assert "skipped validation (proposals: int" in execution.error


def _decide(
    proposal: object,
    *,
    slot: Fact | None = None,
    held: frozenset[tuple[Any, str]] = frozenset(),
    hitl: HitlPolicy | None = None,
    writes: frozenset[Any] | None = None,
) -> Verdict:
    gate = Gate(PromotionPolicy(), kind="engine")
    merged = {} if slot is None else {(slot.key, slot.id): slot}
    return gate.decide(proposal, writes, merged, ContextSnapshot.empty(), held, hitl)


def test_the_gate_decides_each_proposal_once_with_one_typed_verdict() -> None:
    proposal = good("x")
    assert _decide(proposal) is proposal  # admitted as it is: nothing allocated
    copy = base_copy("x", confidence=1)  # an int where validation leaves a float
    admitted = _decide(copy)
    assert type(admitted) is ProposedFact
    assert admitted is not copy  # the validated copy
    assert admitted.__dict__["confidence"] == 1.0
    refused = _decide(good("x"), writes=frozenset({S}))
    assert refused == Reject(good("x"), f"not authorised to write {H}")
    broken = _decide(base_copy("x", content=None))
    assert type(broken) is Reject
    assert broken.reason.startswith("invalid proposal: content")
    held = _decide(good("x"), hitl=HitlPolicy(gated_keys=frozenset({H})))
    assert type(held) is Hold
    assert held.rule.startswith("its key hypotheses")
    again = _decide(good("x"), held=frozenset({(H, "x")}))
    assert again == Reject(good("x"), "hypotheses/x is already held for a human decision")
    merger = Merger(ContextSnapshot.empty(), 1, Gate(PromotionPolicy(), kind="engine"), "stop")
    merger.merge("a", 0, None, [good("x")])
    fact = merger.promoted[0]
    assert _decide(good("x"), slot=fact) is RESTATED
    clash = _decide(good("x", content="Another claim."), slot=fact)
    assert type(clash) is Clash
    assert clash.existing is fact


def test_the_merge_asks_the_gate_once_per_proposal(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    decide = Gate.decide

    def counted(self: Gate, proposal: ProposedFact, *rest: object) -> Verdict:
        asked.append(proposal.id)
        return decide(self, proposal, *rest)  # pyright: ignore[reportArgumentType]

    monkeypatch.setattr(Gate, "decide", counted)
    hitl = HitlPolicy(gated_keys=frozenset({S}))
    merger = Merger(
        ContextSnapshot.empty(), 1, Gate(PromotionPolicy(), kind="engine"), "reject", hitl=hitl
    )
    proposals = [good("a"), good("a"), good("a", content="Other."), good("s", key=S), good("")]
    merger.merge("m", 0, None, proposals)
    assert asked == ["a", "a", "a", "s", ""]
    assert [fact.id for fact in merger.promoted] == ["a"]
    assert [request.proposal.id for request in merger.held] == ["s"]
    assert [r.reason.split(" ")[0] for r in merger.rejections] == ["conflicts", "id"]
