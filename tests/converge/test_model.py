"""Records the kernel builds without validation, and the pydantic versions that allows.

`trusted` and `share_state` (`converge._core._model`) write a model's slots through
pydantic's own descriptors (`__dict__`, `__pydantic_fields_set__`, `__pydantic_extra__`,
`__pydantic_private__`): below pydantic's public API, so the dependency in `pyproject.toml`
is pinned to the minor versions these tests were run on (2.12 and 2.14 so far). Before
widening the pin, run this module on the new version: a record built here must be
indistinguishable from a validated one.
"""

from __future__ import annotations

import copy
import pickle
import re
import tomllib
from pathlib import Path

import anyio
import pydantic
import pytest
from pydantic import BaseModel

from converge import ContextKey, Engine, Execution, Fact, ProposedFact
from converge._core._checkpoint import FactRecord, fact_records
from converge._core._model import Fields, share_names, trusted
from converge._core._seal import Stamp
from converge_suggestors import SeedSuggestor

ROOT = Path(__file__).resolve().parents[2]


def _pin() -> tuple[tuple[int, int], tuple[int, int]]:
    """The `pydantic>=A.B,<C.D` requirement of `pyproject.toml`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [requirement] = [d for d in project["dependencies"] if re.match(r"pydantic\b", d)]
    found = re.fullmatch(r"pydantic>=(\d+)\.(\d+),<(\d+)\.(\d+)", requirement)
    assert found is not None, f"pydantic is not pinned to minor versions: {requirement!r}"
    low_major, low_minor, high_major, high_minor = map(int, found.groups())
    return (low_major, low_minor), (high_major, high_minor)


def test_pydantic_is_pinned_to_the_versions_its_private_slots_were_checked_on() -> None:
    low, high = _pin()
    assert high[0] == low[0] == 2  # never an open-ended major
    assert high[1] - low[1] <= 3  # a few minor versions, each run through this module
    major, minor = map(int, pydantic.VERSION.split(".")[:2])
    assert low <= (major, minor) < high


def test_the_slots_the_kernel_writes_are_pydantics_own() -> None:
    slots = set(BaseModel.__slots__)
    assert {"__dict__", "__pydantic_fields_set__", "__pydantic_extra__"} <= slots
    assert "__pydantic_private__" in slots
    for name in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__"):
        assert hasattr(BaseModel.__dict__[name], "__set__"), name


def _execution(**fields: object) -> dict[str, object]:
    return {
        "suggestor": "s",
        "suggestor_id": 0,
        "outcome": "ok",
        "duration_ms": 1.5,
        "proposals": 1,
        "tokens": 3,
        "error": None,
        "phase": "execute",
        "attempt": 1,
        "tokens_unknown": False,
        "metadata": None,
        "traceback": None,
        "effect": None,
    } | fields


def test_a_trusted_record_is_indistinguishable_from_a_validated_one() -> None:
    built = trusted(Execution, _execution())
    validated = Execution.model_validate(_execution())
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set
    assert built.__pydantic_extra__ is None
    assert pickle.loads(pickle.dumps(built)) == validated
    assert copy.deepcopy(built) == validated
    changed = built.model_copy(update={"tokens": 4})
    assert (changed.tokens, built.tokens) == (4, 3)


def test_a_fact_with_shared_state_reads_and_dumps_as_pydantic_says() -> None:
    proposal = ProposedFact(
        key=ContextKey.SEEDS, id="a", content="A claim.", provenance="t", payload={"n": 1}
    )
    fact = Stamp("s", 0, "engine", None).promote(proposal, 1, 1)
    assert type(fact) is Fact
    assert fact.model_fields_set == set(Fact.model_fields)
    assert fact.__pydantic_extra__ is None
    assert fact.__pydantic_private__ is None
    dumped = fact.model_dump(mode="json")
    assert (dumped["key"], dumped["id"], dumped["payload"]) == ("seeds", "a", {"n": 1})
    assert fact.model_dump_json() == fact.model_dump_json()  # nothing read changes it


def test_a_kept_proposal_reads_as_before_with_a_shared_set_of_names() -> None:
    def made() -> ProposedFact:
        return ProposedFact(key=ContextKey.SEEDS, id="a", content="c", provenance="t")

    proposal, other, fresh = made(), made(), made()
    share_names(proposal)
    share_names(other)
    assert proposal.__pydantic_fields_set__ is other.__pydantic_fields_set__  # one set for both
    assert proposal.model_fields_set == fresh.model_fields_set
    assert proposal.model_dump(exclude_unset=True) == fresh.model_dump(exclude_unset=True)
    assert proposal == fresh
    assert pickle.loads(pickle.dumps(proposal)) == fresh
    assert copy.deepcopy(proposal).model_fields_set == fresh.model_fields_set
    changed = proposal.model_copy(update={"content": "d"})
    assert changed.content == "d"
    assert changed.model_fields_set == fresh.model_fields_set
    with pytest.raises(TypeError, match="shared and read-only"):
        proposal.model_fields_set.add("payload")
    assert other.model_fields_set == fresh.model_fields_set


def test_a_recorded_trace_keeps_its_proposals_with_shared_names() -> None:
    def engine() -> Engine:
        made = Engine(record_effects=True)
        made.register_suggestor(SeedSuggestor("a", "go"))
        made.register_suggestor(SeedSuggestor("b", "go"))
        return made

    result = engine().run_sync()
    kept = [
        proposal
        for cycle in result.trace.cycles
        for execution in cycle.executions
        if execution.effect is not None
        for proposal in execution.effect.proposals
    ]
    assert len(kept) == 2
    assert kept[0].__pydantic_fields_set__ is kept[1].__pydantic_fields_set__
    replayed = anyio.run(engine().replay, result.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root


def test_the_records_of_a_runs_facts_read_as_validated_ones_with_compact_fields() -> None:
    engine = Engine()
    engine.register_suggestor(SeedSuggestor("a", "go"))
    context = engine.run_sync(
        inputs=[
            ProposedFact(
                key=ContextKey.SEEDS, id="p", content="ünï", provenance="t", payload={"n": [1]}
            )
        ]
    ).context
    records, problem = fact_records(context)
    assert problem is None
    assert len(records) == 2
    for record in records:
        validated = FactRecord.model_validate_json(record.model_dump_json())
        assert record == validated
        assert record.model_dump() == validated.model_dump()
        assert record.model_dump_json() == validated.model_dump_json()
        assert record.model_fields_set == validated.model_fields_set
        assert list(record.__dict__) == list(validated.__dict__)  # the fields' own order
        assert list(record.promotion.__dict__) == list(validated.promotion.__dict__)
        assert pickle.loads(pickle.dumps(record)) == record
        assert copy.deepcopy(record) == record
        changed = record.model_copy(update={"id": "other"})
        assert (changed.id, record.id) == ("other", validated.id)
        with pytest.raises(pydantic.ValidationError):
            record.id = "x"  # pyright: ignore[reportAttributeAccessIssue]


def test_a_fields_instance_holds_what_was_set_in_that_order() -> None:
    class Pair(Fields):
        first: object
        second: object

    pair = object.__new__(Pair)
    pair.second = 2
    pair.first = 1
    assert pair.values() == {"second": 2, "first": 1}
    assert list(pair.values()) == ["second", "first"]
