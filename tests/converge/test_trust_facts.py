"""Trust in promoted facts: a fact cannot be rewritten, and a payload cannot change.

Attack A: a promoted fact rewritten through pydantic's base-class routes, or in place through
its `__dict__`, with its digest recomputed from the public hashing rules. Attack B: a payload
changed in place after promotion, after a pause for a human, or through a recorded effect.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from collections.abc import Callable
from typing import Any, cast

import pytest
from hitl_formation import SIGNING_KEY
from pydantic import BaseModel, JsonValue, ValidationError

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    Fact,
    GateDecision,
    HitlPolicy,
    IntegrityProof,
    PromotionRecord,
    ProposedFact,
    RunRecord,
    StopReason,
    StoreError,
    verify,
)

SEEDS = ContextKey.SEEDS
S = ContextKey.STRATEGIES


def seed(payload: JsonValue = None) -> ProposedFact:
    return ProposedFact(
        key=SEEDS, id="goal", content="Grow revenue.", provenance="me", payload=payload
    )


def promoted(payload: JsonValue = None) -> tuple[Engine, Fact]:
    engine = Engine()
    fact = engine.run_sync(inputs=[seed(payload)]).context.facts()[0]
    return engine, fact


def public_digest(fact: Fact) -> str:
    """The leaf digest the public hashing rules give for a fact's fields (integrity.md)."""
    record = fact.model_dump(mode="json")
    record.pop("digest")
    text = json.dumps(
        record, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(b"\x00" + text.encode("utf-8")).hexdigest()


def rewrite(fact: Fact, **changes: object) -> None:
    """The attack past every public route: rewrite the fields, then recompute the digest
    (kept as its 32 bytes, as the fact keeps it)."""
    fields = vars(fact)
    dict[str, Any].update(fields, changes)
    dict[str, Any].__setitem__(fields, "digest", bytes.fromhex(public_digest(fact)))


# --- A: the base-class routes raise, or build nothing that is a fact of a context -----------


REWRITES: dict[str, Callable[[Fact], object]] = {
    "BaseModel.model_copy(update=...)": lambda f: BaseModel.model_copy(
        f, update={"content": "Cut costs."}
    ),
    "BaseModel.model_copy(update=..., deep=True)": lambda f: BaseModel.model_copy(
        f, update={"content": "Cut costs."}, deep=True
    ),
    "__dict__.update": lambda f: vars(f).update(content="Cut costs."),
    "__dict__[name] = value": lambda f: vars(f).__setitem__("content", "Cut costs."),
    "__dict__.pop": lambda f: vars(f).pop("content"),
    "__dict__.clear": lambda f: vars(f).clear(),
    "__dict__.setdefault": lambda f: vars(f).setdefault("extra", 1),
    "vars(fact) |= ...": lambda f: vars(f).__ior__({"content": "Cut costs."}),
    "__dict__.__init__": lambda f: vars(f).__init__(content="Cut costs."),
}


@pytest.mark.parametrize("route", sorted(REWRITES))
def test_a_promoted_fact_cannot_be_rewritten_in_place(route: str) -> None:
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    with pytest.raises(TypeError):
        REWRITES[route](fact)
    assert fact.content == "Grow revenue."
    assert fact.digest == public_digest(fact)
    assert verify(result.context, result.integrity)


BUILDS: dict[str, Callable[[Fact], object]] = {
    "BaseModel.model_construct": lambda f: BaseModel.model_construct.__func__(
        Fact, **f.model_dump()
    ),
    "BaseModel.__copy__": lambda f: BaseModel.__copy__(f),
    "BaseModel.__deepcopy__": lambda f: BaseModel.__deepcopy__(f),
    "Fact.__new__": lambda f: Fact.__new__(Fact),
}


@pytest.mark.parametrize("route", sorted(BUILDS))
def test_the_base_class_routes_build_no_fact(route: str) -> None:
    _, fact = promoted()
    with pytest.raises(TypeError):
        BUILDS[route](fact)


def test_fact_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError):
        type("Forged", (Fact,), {})


def test_copies_of_a_fact_are_the_fact_itself() -> None:
    _, fact = promoted({"a": [1]})
    assert copy.copy(fact) is fact
    assert copy.deepcopy(fact) is fact
    assert BaseModel.model_copy(fact) is fact
    assert BaseModel.model_copy(fact, deep=True) is fact


def test_verify_refuses_a_fact_rewritten_with_a_recomputed_digest() -> None:
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    rewrite(fact, content="Cut costs.")
    assert fact.digest == public_digest(fact)  # the fact is consistent with itself
    assert not verify(result.context, result.integrity)
    assert IntegrityProof.of(result.context) == result.integrity  # the root is the engine's


def test_verify_refuses_a_fact_whose_digest_field_alone_was_changed() -> None:
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    dict[str, Any].__setitem__(vars(fact), "digest", "0" * 64)
    assert not verify(result.context, result.integrity)


@pytest.mark.parametrize(
    ("where", "name", "value"),
    [("fact", "confidence", 1), ("record", "clock", True), ("record", "suggestor_id", -1.0)],
)
def test_verify_refuses_a_field_given_another_type_of_the_same_json(
    where: str, name: str, value: object
) -> None:
    # 1 for 1.0 or 1.0 for 1 writes the same canonical JSON: only the type changed
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    if where == "fact":
        assert vars(fact)[name] == value
        dict[str, Any].__setitem__(vars(fact), name, value)
    else:  # the fact keeps its record's values as a tuple, in the model's field order
        values = list(vars(fact)["promotion"])
        index = list(PromotionRecord.model_fields).index(name)
        assert values[index] == value
        values[index] = value
        dict[str, Any].__setitem__(vars(fact), "promotion", tuple(values))
    assert not verify(result.context, result.integrity)


def test_a_promotion_record_read_from_a_fact_is_a_copy_that_cannot_change_it() -> None:
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    record = fact.promotion
    dict[str, Any].__setitem__(vars(record), "clock", 99)
    assert fact.promotion.clock == 1
    assert fact.promotion == fact.promotion
    assert fact.promotion is not fact.promotion
    assert verify(result.context, result.integrity)


@pytest.mark.parametrize("values", [(0, "input", -1, 1, "input"), None, "0,input,-1,1,input,"])
def test_verify_refuses_a_fact_whose_kept_promotion_values_were_replaced(values: object) -> None:
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    dict[str, Any].__setitem__(vars(fact), "promotion", values)
    assert not verify(result.context, result.integrity)


@pytest.mark.parametrize("names", [("content",), ("key", "confidence")])
def test_verify_refuses_a_fact_with_a_field_deleted_below_the_api(names: tuple[str, ...]) -> None:
    # ("key", "confidence"): the retyped confidence is reported by the fact's ref, which
    # reads the deleted key; verify must still answer, not raise
    result = Engine().run_sync(inputs=[seed()])
    fact = result.context.facts()[0]
    for name in names:
        dict[str, Any].__delitem__(vars(fact), name)
    if "confidence" in names:
        dict[str, Any].__setitem__(vars(fact), "confidence", 1)
    assert not verify(result.context, result.integrity)


class Rewriter:
    """In cycle 1, rewrites the seed fact it can read and recomputes its digest."""

    name = "rewriter"
    dependencies = (SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(ContextKey.HYPOTHESES)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        goal = ctx.find(SEEDS, "goal")
        assert goal is not None
        rewrite(goal, content="Cut costs.")
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id="h", content="Later.", provenance=self.name)
        )


def rewritten_run(engine: Engine) -> ConvergeResult:
    engine.register_suggestor(Rewriter())
    return engine.run_sync(inputs=[seed()])


def test_a_fact_rewritten_during_the_run_fails_its_own_proof() -> None:
    result = rewritten_run(Engine())
    goal = result.context.find(SEEDS, "goal")
    assert goal is not None
    assert goal.content == "Cut costs."  # rewritten, digest recomputed, by a suggestor
    assert not verify(result.context, result.integrity)


def test_a_fact_rewritten_during_the_run_does_not_restore_from_its_record() -> None:
    result = rewritten_run(Engine())
    record = RunRecord.of(result, key=b"k")
    refused = r"fact seeds/goal: digest .* does not match its fields"
    with pytest.raises(StoreError, match=refused):  # recorded with the leaf kept for it
        record.restore_context()
    loaded = RunRecord.model_validate_json(record.model_dump_json())
    with pytest.raises(StoreError, match="unsigned"):  # never signed as the engine's ...
        loaded.verify_signature(b"k")
    with pytest.raises(StoreError, match=refused):
        loaded.restore_context()  # ... and refused


class Gated:
    """Proposes one gated strategy once the seed exists."""

    name = "gated"
    dependencies = (SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(S)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(key=S, id="plan", content="Spend.", provenance=self.name, confidence=0.1)
        )


async def test_a_fact_rewritten_before_a_pause_never_gets_a_signed_checkpoint() -> None:
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5), signing_key=SIGNING_KEY)
    engine.register_suggestor(Gated())
    engine.register_suggestor(Rewriter())
    stopped = await engine.run(inputs=[seed()])
    assert stopped.stop_reason is StopReason.INVARIANT_VIOLATED
    assert stopped.detail.startswith("integrity: fact seeds/goal was changed")
    assert (stopped.checkpoint, stopped.pending) == (None, ())


class PromotionBreaker:
    """In cycle 1, replaces the seed fact's kept promotion values with `values`."""

    name = "breaker"
    dependencies = (SEEDS,)

    def __init__(self, values: object) -> None:
        self.values = values

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(ContextKey.HYPOTHESES)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        goal = ctx.find(SEEDS, "goal")
        assert goal is not None
        dict[str, Any].__setitem__(vars(goal), "promotion", self.values)
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id="h", content="Later.", provenance=self.name)
        )


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's, dumping the broken record
@pytest.mark.parametrize("values", [None, (1, 2), 5])
async def test_a_fact_whose_promotion_was_broken_ends_the_run_instead_of_pausing(
    values: object,
) -> None:
    # The run must still stop, not raise from reading the broken record, and must not
    # pause with a checkpoint holding it; its record must still be storable.
    engine = Engine(hitl=HitlPolicy(confidence_below=0.5), signing_key=SIGNING_KEY)
    engine.register_suggestor(Gated())
    engine.register_suggestor(PromotionBreaker(values))
    stopped = await engine.run(inputs=[seed()])
    assert stopped.stop_reason is StopReason.INVARIANT_VIOLATED
    assert stopped.checkpoint is None
    assert not verify(stopped.context, stopped.integrity)
    goal = stopped.context.find(SEEDS, "goal")
    assert goal is not None
    assert goal.promotion.cycle == values  # read back as it is, unvalidated
    record = RunRecord.of(stopped, key=SIGNING_KEY.encode())
    assert RunRecord.model_validate_json(record.model_dump_json()) == record
    with pytest.raises(StoreError, match="fact seeds/goal: digest"):
        record.restore_context()


# --- B: payloads are frozen at validation and shared, never copied ---------------------------


def test_a_promoted_payload_cannot_be_changed_in_place() -> None:
    result = Engine().run_sync(inputs=[seed({"price": 10, "tags": ["a"], "nested": {"x": 1}})])
    fact = result.context.facts()[0]
    payload = cast("dict[str, Any]", fact.payload)
    with pytest.raises(TypeError):
        payload["price"] = 11
    with pytest.raises(TypeError):
        payload["tags"].append("b")
    with pytest.raises(TypeError):
        payload["nested"]["x"] = 2
    assert payload == {"price": 10, "tags": ["a"], "nested": {"x": 1}}
    assert verify(result.context, result.integrity)


def test_a_fact_shares_the_frozen_payload_of_its_proposal() -> None:
    proposal = seed({"price": 10})
    fact = Engine().run_sync(inputs=[proposal]).context.facts()[0]
    assert fact.payload is proposal.payload


class Spender:
    """Proposes a gated spend of 10, and keeps its own payload dict and the proposal."""

    name = "spender"
    dependencies = (SEEDS,)

    def __init__(self) -> None:
        self.payload: dict[str, Any] = {"amount": 10}
        self.proposal: ProposedFact | None = None

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(S)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.proposal = ProposedFact(
            key=S, id="spend", content="Spend it.", provenance=self.name, payload=self.payload
        )
        return AgentEffect.with_proposal(self.proposal)


async def test_a_held_proposal_payload_cannot_be_changed_after_the_pause() -> None:
    engine = Engine(hitl=HitlPolicy(gated_keys=frozenset({S})), record_effects=True)
    spender = Spender()
    engine.register_suggestor(spender)
    paused = await engine.run(inputs=[seed()])
    assert paused.checkpoint is not None
    assert spender.proposal is not None
    spender.payload["amount"] = 10_000_000  # its own dict: not the proposal's
    with pytest.raises(TypeError):
        cast("dict[str, Any]", spender.proposal.payload)["amount"] = 10_000_000
    [request] = paused.pending
    assert request.proposal.payload == {"amount": 10}
    execution = paused.trace.cycles[0].executions[0]
    assert execution.effect is not None
    assert execution.effect.proposals[0].payload == {"amount": 10}
    decision = GateDecision.approve(request.gate_id, by="jane")
    result = await engine.resume(paused.checkpoint, [decision])
    approved = result.context.find(S, "spend")
    assert approved is not None
    assert approved.payload == {"amount": 10}
    assert verify(result.context, result.integrity)


DICT_MUTATORS: dict[str, Callable[[dict[str, Any]], object]] = {
    "setitem": lambda d: d.__setitem__("a", 2),
    "delitem": lambda d: d.__delitem__("a"),
    "clear": lambda d: d.clear(),
    "pop": lambda d: d.pop("a"),
    "popitem": lambda d: d.popitem(),
    "setdefault": lambda d: d.setdefault("b", 1),
    "update": lambda d: d.update(b=1),
    "ior": lambda d: d.__ior__({"b": 1}),
    "setattr": lambda d: setattr(d, "x", 1),
}
LIST_MUTATORS: dict[str, Callable[[list[Any]], object]] = {
    "setitem": lambda v: v.__setitem__(0, 2),
    "setitem slice": lambda v: v.__setitem__(slice(0, 1), [2]),
    "delitem": lambda v: v.__delitem__(0),
    "append": lambda v: v.append(2),
    "extend": lambda v: v.extend([2]),
    "insert": lambda v: v.insert(0, 2),
    "pop": lambda v: v.pop(),
    "remove": lambda v: v.remove(1),
    "clear": lambda v: v.clear(),
    "sort": lambda v: v.sort(),
    "reverse": lambda v: v.reverse(),
    "iadd": lambda v: v.__iadd__([2]),
    "imul": lambda v: v.__imul__(2),
    "setattr": lambda v: setattr(v, "x", 1),
}


@pytest.mark.parametrize("mutator", sorted(DICT_MUTATORS))
def test_every_mutator_of_a_frozen_object_raises(mutator: str) -> None:
    payload = cast("dict[str, Any]", seed({"a": 1}).payload)
    with pytest.raises((TypeError, AttributeError)):
        DICT_MUTATORS[mutator](payload)
    assert payload == {"a": 1}


@pytest.mark.parametrize("mutator", sorted(LIST_MUTATORS))
def test_every_mutator_of_a_frozen_array_raises(mutator: str) -> None:
    payload = cast("list[Any]", seed([1]).payload)
    with pytest.raises((TypeError, AttributeError)):
        LIST_MUTATORS[mutator](payload)
    assert payload == [1]


def test_calling_init_again_changes_nothing() -> None:
    mapping = cast("dict[str, Any]", seed({"a": 1}).payload)
    mapping.__init__(b=1)
    array = cast("list[Any]", seed([1]).payload)
    array.__init__([2])
    assert (mapping, array) == ({"a": 1}, [1])


def test_a_frozen_payload_behaves_as_plain_json() -> None:
    given: dict[str, Any] = {"b": [1, 2.5, None, True, {"c": "Zoë"}], "a": {}}
    proposal = seed(given)
    payload = cast("dict[str, Any]", proposal.payload)
    assert payload == given
    assert payload is not given
    assert isinstance(payload, dict)
    assert isinstance(payload["b"], list)
    assert json.dumps(payload, sort_keys=True) == json.dumps(given, sort_keys=True)
    assert json.loads(proposal.model_dump_json())["payload"] == given
    assert ProposedFact.model_validate_json(proposal.model_dump_json()) == proposal
    assert copy.copy(payload) is payload
    assert copy.deepcopy(payload) is payload
    assert pickle.loads(pickle.dumps(payload)) == given
    assert copy.deepcopy(proposal) == proposal
    mutable = payload.copy()
    mutable["a"] = 1  # `.copy()` gives a plain, mutable dict
    assert type(mutable) is dict
    assert payload["a"] == {}


def test_the_suggestors_own_payload_is_not_the_proposals() -> None:
    given: dict[str, Any] = {"rows": [1, 2]}
    proposal = seed(given)
    given["rows"].append(3)
    assert proposal.payload == {"rows": [1, 2]}


def test_a_payload_that_holds_itself_or_nests_too_deep_is_a_validation_error() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValidationError, match="nests deeper than 128 levels"):
        seed(cyclic)
    deep: list[Any] = []
    for _ in range(128):
        deep = [deep]
    with pytest.raises(ValidationError, match="nests deeper than 128 levels"):
        seed(deep)
    assert seed(deep[0]).payload == deep[0]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"a": {1, 2}}, r"payload\.a holds a set, which is not a JSON value"),
        ({"a": [b"x"]}, r"payload\.a\[0\] holds a bytes, which is not a JSON value"),
        ({1: "x"}, "payload has a key of type int; JSON keys are text"),
        ({"\ud800": 1}, "payload key '\\\\ud800' holds a lone surrogate"),
        ((1, 2), "payload holds a tuple, which is not a JSON value"),
    ],
)
def test_a_payload_that_is_not_json_names_where(payload: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ProposedFact.model_validate(
            {"key": SEEDS, "id": "a", "content": "x", "provenance": "me", "payload": payload}
        )


def test_text_and_number_subclasses_become_plain_values() -> None:
    payload = cast("dict[str, Any]", seed({"key": ContextKey.SEEDS, "flag": True}).payload)
    assert type(payload["key"]) is str
    assert payload == {"key": "seeds", "flag": True}
