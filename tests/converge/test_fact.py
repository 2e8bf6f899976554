"""The promotion boundary: every public route that could build or change a Fact is closed."""

import copy
import pickle
from collections.abc import Callable

import pytest
from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from converge import (
    AgentEffect,
    ContextKey,
    Engine,
    Fact,
    FactRecord,
    PromotionRecord,
    ProposedFact,
    suggestor,
    verify,
)


def promoted_fact(payload: JsonValue = None) -> Fact:
    engine = Engine()
    proposal = ProposedFact(
        key=ContextKey.SEEDS, id="s1", content="seed", provenance="test", payload=payload
    )
    result = engine.run_sync(inputs=[proposal])
    fact = result.context.find(ContextKey.SEEDS, "s1")
    assert fact is not None
    return fact


FORGERIES: dict[str, Callable[[Fact], object]] = {
    "constructor": lambda f: Fact(**f.model_dump()),
    "model_validate": lambda f: Fact.model_validate(f.model_dump()),
    "model_validate_json": lambda f: Fact.model_validate_json(f.model_dump_json()),
    "model_validate_strings": lambda f: Fact.model_validate_strings(f.model_dump(mode="json")),
    "model_construct": lambda f: Fact.model_construct(**f.model_dump()),
    "model_copy": lambda f: f.model_copy(update={"content": "forged"}),
    "type_adapter": lambda f: TypeAdapter(Fact).validate_python(f.model_dump()),
    "type_adapter_json": lambda f: TypeAdapter(Fact).validate_json(f.model_dump_json()),
    "setattr": lambda f: setattr(f, "content", "forged"),
    "delattr": lambda f: delattr(f, "content"),
    "pickle": lambda f: pickle.loads(pickle.dumps(f)),
}


@pytest.mark.parametrize("route", sorted(FORGERIES))
def test_fact_forgery_route_raises_type_error(route: str) -> None:
    fact = promoted_fact()
    with pytest.raises(TypeError, match="only the engine promotes"):
        FORGERIES[route](fact)
    assert fact.content == "seed"


def test_fact_field_inside_another_model_raises_type_error() -> None:
    with pytest.raises(TypeError, match="only the engine promotes"):

        class Holder(BaseModel):  # pyright: ignore[reportUnusedClass]
            fact: Fact


def test_fact_in_a_container_field_raises_type_error() -> None:
    with pytest.raises(TypeError, match="only the engine promotes"):
        TypeAdapter(list[Fact])


def test_agent_effect_refuses_a_fact() -> None:
    fact = promoted_fact()
    with pytest.raises(ValidationError):
        AgentEffect(proposals=(fact,))  # pyright: ignore[reportArgumentType]


def test_agent_effect_refuses_a_dumped_fact() -> None:
    fact = promoted_fact()
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        AgentEffect.model_validate({"proposals": [fact.model_dump()]})


def test_fact_copy_returns_the_same_object() -> None:
    fact = promoted_fact()
    assert copy.copy(fact) is fact
    assert copy.deepcopy(fact) is fact


def test_fact_payload_is_a_private_copy_of_the_proposal_payload() -> None:
    shared: dict[str, JsonValue] = {"price": 10, "tags": ["a"]}
    proposal = ProposedFact(
        key=ContextKey.SEEDS, id="p", content="priced", provenance="test", payload=shared
    )
    engine = Engine()

    @suggestor(name="mutator", dependencies=[ContextKey.SEEDS])
    async def mutator(ctx: object) -> list[ProposedFact]:
        return []

    engine.register_suggestor(mutator)
    result = engine.run_sync(inputs=[proposal])
    shared["price"] = 99
    fact = result.context.find(ContextKey.SEEDS, "p")
    assert fact is not None
    assert fact.payload == {"price": 10, "tags": ["a"]}
    assert verify(result.context, result.integrity)


def test_fact_mutated_in_place_fails_verification() -> None:
    engine = Engine()
    proposal = ProposedFact(
        key=ContextKey.SEEDS, id="p", content="priced", provenance="test", payload={"price": 10}
    )
    result = engine.run_sync(inputs=[proposal])
    fact = result.context.find(ContextKey.SEEDS, "p")
    assert fact is not None
    assert isinstance(fact.payload, dict)
    with pytest.raises(TypeError):
        fact.payload["price"] = 11  # payloads are frozen
    dict[str, JsonValue].__setitem__(fact.payload, "price", 11)  # below the API: verify sees it
    assert not verify(result.context, result.integrity)


def test_fact_payload_as_validates_into_a_model() -> None:
    class Price(BaseModel):
        price: int

    fact = promoted_fact({"price": 10})
    assert fact.payload_as(Price) == Price(price=10)


def test_fact_payload_as_raises_validation_error_for_a_mismatch() -> None:
    class Price(BaseModel):
        price: int

    fact = promoted_fact({"cost": 10})
    with pytest.raises(ValidationError):
        fact.payload_as(Price)


def test_fact_ref_and_repr_name_key_and_id() -> None:
    fact = promoted_fact()
    assert fact.ref == "seeds/s1"
    assert "seeds/s1" in repr(fact)


def test_fact_digest_is_hex_sha256() -> None:
    fact = promoted_fact()
    assert len(fact.digest) == 64
    int(fact.digest, 16)


def test_fact_dump_round_trips_through_json() -> None:
    fact = promoted_fact({"x": [1, 2.5, None, True]})
    data = fact.model_dump(mode="json")
    assert data["promotion"]["gate"] == "input"
    assert data["digest"] == fact.digest


def test_every_route_that_lists_a_facts_fields_gives_its_promotion_record() -> None:
    fact = promoted_fact({"x": [1]})
    record = fact.promotion
    assert isinstance(record, PromotionRecord)
    assert (record.cycle, record.suggestor, record.clock, record.gate) == (0, "input", 1, "input")
    assert dict(fact)["promotion"] == record
    assert list(dict(fact)) == list(Fact.model_fields)
    assert fact.model_dump()["promotion"] == record.model_dump()
    assert fact.model_dump_json() == FactRecord.of(fact).model_dump_json()
    assert FactRecord.of(fact).promotion == record
    assert "promotion" in Fact.model_fields


def test_a_fact_keeps_its_digest_as_bytes_and_reads_it_as_hex() -> None:
    fact = promoted_fact({"x": [1]})
    kept = vars(fact)["digest"]
    assert type(kept) is bytes
    assert len(kept) == 32
    assert fact.digest == kept.hex() == dict(fact)["digest"] == fact.model_dump()["digest"]
    assert fact.model_dump(mode="json")["digest"] == fact.digest
    assert "digest" in Fact.model_fields


@pytest.mark.parametrize(
    ("slot", "value"),
    [
        ("__pydantic_fields_set__", {"content"}),
        ("__pydantic_extra__", {"forged": 1}),
        ("__pydantic_private__", {"_forged": 1}),
    ],
)
def test_pydantics_state_of_a_fact_is_its_class_and_cannot_be_written(
    slot: str, value: object
) -> None:
    """Every fact has every field set, no extra field and no private attribute: the class
    answers for all three, and not even `object.__setattr__` writes a fact's own."""
    fact, other = promoted_fact({"x": [1]}), promoted_fact({"x": [1]})
    assert fact.model_fields_set == set(Fact.model_fields)
    assert fact.model_extra is None
    assert fact.__pydantic_private__ is None
    assert fact.model_dump(exclude_unset=True) == fact.model_dump()
    assert fact == other
    with pytest.raises(AttributeError):
        object.__setattr__(fact, slot, value)
    with pytest.raises(TypeError):
        fact.model_fields_set.add("forged")
    assert fact.model_dump() == other.model_dump()
    assert list(vars(fact)) == list(Fact.model_fields)
