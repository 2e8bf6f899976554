"""Properties of a run that hold for every formation: determinism, budgets, growth, integrity."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from converge import (
    Budget,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Fact,
    ProposedFact,
    StopReason,
    verify,
)
from tests.strategies import (
    ConflictMode,
    FixedSpec,
    FormationSpec,
    Latency,
    build_engine,
    conflict_modes,
    formations,
    latency_seeds,
    proposals,
    same_claim,
    surrogate_texts,
    unique_inputs,
    valid_proposals,
)

CONCURRENCY_LIMITS = (None, 1, 2, 7)
inputs_lists = st.lists(proposals, max_size=8)


def outcome(result: ConvergeResult) -> tuple[object, ...]:
    """Everything a run decides, without its run id or timings."""
    return (
        result.stop_reason,
        result.detail,
        result.cycles,
        [fact.model_dump() for fact in result.context.facts()],
        result.integrity.merkle_root,
        result.integrity.clock,
        [rejection.model_dump() for rejection in result.rejections],
        [cycle.promoted for cycle in result.trace.cycles],
    )


def find_ref(context: ContextSnapshot, ref: str) -> Fact | None:
    key, _, ident = ref.partition("/")
    return context.find(ContextKey(key), ident)


def input_merge_order(result: ConvergeResult, inputs: list[ProposedFact]) -> list[str]:
    """Refs of the facts the inputs became, in the order the inputs were given."""
    order: list[str] = []
    for proposal in inputs:
        fact = result.context.find(proposal.key, proposal.id)
        if (
            fact is not None
            and fact.promotion.gate == "input"
            and same_claim(fact, proposal)
            and fact.ref not in order
        ):
            order.append(fact.ref)
    return order


async def run_formation(
    formation: FormationSpec,
    inputs: list[ProposedFact],
    *,
    on_conflict: ConflictMode = "reject",
    seed: int | None = None,
    context: ContextSnapshot | None = None,
) -> ConvergeResult:
    engine = build_engine(formation, latency=Latency(seed), on_conflict=on_conflict)
    return await engine.run(context, inputs=inputs)


def accounted_input(result: ConvergeResult, proposal: ProposedFact) -> Literal["fact", "rejected"]:
    """Whether an input became a fact or was rejected at cycle 0; fails if both or neither."""
    rejected = [
        rejection
        for rejection in result.rejections
        if rejection.cycle == 0 and rejection.proposal == proposal
    ]
    fact = result.context.find(proposal.key, proposal.id)
    promoted = fact is not None and same_claim(fact, proposal)
    assert promoted != bool(rejected), (proposal, fact, rejected)
    if fact is not None and promoted:
        record = fact.promotion
        assert (record.gate, record.suggestor, record.suggestor_id, record.cycle) == (
            "input",
            "input",
            -1,
            0,
        )
        return "fact"
    assert [rejection.suggestor for rejection in rejected] == ["input"]
    return "rejected"


# -- 1. determinism ----------------------------------------------------------------------------


@pytest.mark.slow
@given(
    formation=formations(always_new=None),
    inputs=inputs_lists,
    on_conflict=conflict_modes,
    seeds=st.lists(latency_seeds, min_size=4, max_size=4),
)
async def test_run_is_deterministic_across_latencies_and_concurrency_limits(
    formation: FormationSpec,
    inputs: list[ProposedFact],
    on_conflict: ConflictMode,
    seeds: list[int],
) -> None:
    """Each run draws other delays and limits; facts, order, root and rejections never change."""
    outcomes: list[tuple[object, ...]] = []
    for limit, seed in zip(CONCURRENCY_LIMITS, seeds, strict=True):
        engine = build_engine(
            formation, latency=Latency(seed), max_concurrency=limit, on_conflict=on_conflict
        )
        outcomes.append(outcome(await engine.run(inputs=inputs)))
    for other in outcomes[1:]:
        assert other == outcomes[0]


# -- 2. termination under budget ---------------------------------------------------------------


@given(
    formation=formations(always_new=True),
    max_cycles=st.integers(min_value=1, max_value=6),
    max_facts=st.integers(min_value=0, max_value=60),
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_run_stops_within_max_cycles_when_a_suggestor_always_adds_a_fact(
    formation: FormationSpec, max_cycles: int, max_facts: int, on_conflict: ConflictMode, seed: int
) -> None:
    budget = Budget(max_cycles=max_cycles, max_facts=max_facts)
    engine = build_engine(formation, latency=Latency(seed), budget=budget, on_conflict=on_conflict)
    result = await engine.run()
    assert result.stop_reason in {
        StopReason.CYCLE_BUDGET_EXHAUSTED,
        StopReason.FACT_BUDGET_EXHAUSTED,
        StopReason.CONFLICT,
    }
    assert result.cycles <= max_cycles
    assert len(result.trace.cycles) <= max_cycles


@given(
    formation=formations(always_new=True),
    max_cycles=st.integers(min_value=1, max_value=6),
    seed=latency_seeds,
)
async def test_run_reports_max_cycles_when_the_cycle_budget_runs_out(
    formation: FormationSpec, max_cycles: int, seed: int
) -> None:
    budget = Budget(max_cycles=max_cycles, max_facts=10_000)
    engine = build_engine(formation, latency=Latency(seed), budget=budget, on_conflict="reject")
    result = await engine.run()
    assert result.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert result.detail == f"max_cycles ({max_cycles})"
    assert result.cycles == max_cycles
    assert [cycle.cycle for cycle in result.trace.cycles] == list(range(1, max_cycles + 1))


# -- 3. append-only growth ---------------------------------------------------------------------


@given(
    first=formations(always_new=None),
    second=formations(always_new=None),
    first_inputs=inputs_lists,
    second_inputs=inputs_lists,
    on_conflict=conflict_modes,
)
async def test_run_keeps_every_fact_of_the_starting_context_unchanged(
    first: FormationSpec,
    second: FormationSpec,
    first_inputs: list[ProposedFact],
    second_inputs: list[ProposedFact],
    on_conflict: ConflictMode,
) -> None:
    previous = await run_formation(first, first_inputs, on_conflict=on_conflict)
    old = previous.context
    new = (await run_formation(second, second_inputs, on_conflict=on_conflict, context=old)).context
    for fact in old.facts():
        found = new.find(fact.key, fact.id)
        assert found == fact
        assert found is not None
        assert found.digest == fact.digest
    for key in ContextKey:
        assert tuple(new.get(key))[: old.count(key)] == tuple(old.get(key))


@pytest.mark.slow
@given(
    first=formations(always_new=None),
    second=formations(always_new=None),
    first_inputs=inputs_lists,
    second_inputs=inputs_lists,
    on_conflict=conflict_modes,
)
async def test_run_never_decreases_the_context_version(
    first: FormationSpec,
    second: FormationSpec,
    first_inputs: list[ProposedFact],
    second_inputs: list[ProposedFact],
    on_conflict: ConflictMode,
) -> None:
    """The version grows by exactly the number of facts the run added."""
    old = (await run_formation(first, first_inputs, on_conflict=on_conflict)).context
    new = (await run_formation(second, second_inputs, on_conflict=on_conflict, context=old)).context
    assert new.version >= old.version
    assert new.version - old.version == len(new) - len(old)


@given(
    formation=formations(always_new=None),
    inputs=inputs_lists,
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_run_trace_promotes_only_facts_found_in_the_final_context(
    formation: FormationSpec, inputs: list[ProposedFact], on_conflict: ConflictMode, seed: int
) -> None:
    """Every `CycleTrace.promoted` ref is a fact of the result, promoted in that cycle, once."""
    result = await run_formation(formation, inputs, on_conflict=on_conflict, seed=seed)
    refs = [ref for cycle in result.trace.cycles for ref in cycle.promoted]
    assert len(refs) == len(set(refs))
    for cycle in result.trace.cycles:
        for ref in cycle.promoted:
            fact = find_ref(result.context, ref)
            assert fact is not None, ref
            assert fact.promotion.cycle == cycle.cycle


# -- 4. fixed-point stability ------------------------------------------------------------------


@given(
    formation=formations(),
    inputs=inputs_lists,
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_converged_context_converges_again_in_one_cycle_with_the_same_root(
    formation: FormationSpec, inputs: list[ProposedFact], on_conflict: ConflictMode, seed: int
) -> None:
    engine = build_engine(formation, latency=Latency(seed), on_conflict=on_conflict)
    first = await engine.run(inputs=inputs)
    assume(first.converged)
    again = await engine.run(first.context)
    assert again.stop_reason is StopReason.CONVERGED
    assert again.cycles == 1
    assert again.integrity.merkle_root == first.integrity.merkle_root
    assert again.context.facts() == first.context.facts()
    assert [cycle.promoted for cycle in again.trace.cycles] == [()]


# -- 5. inputs ---------------------------------------------------------------------------------


@given(
    inputs=unique_inputs(),
    formation=formations(always_new=None),
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_run_promotes_or_rejects_each_input_exactly_once(
    inputs: list[ProposedFact], formation: FormationSpec, on_conflict: ConflictMode, seed: int
) -> None:
    """Each input is a fact from the input gate or a cycle-0 rejection: never both nor neither."""
    result = await run_formation(formation, inputs, on_conflict=on_conflict, seed=seed)
    verdicts = [accounted_input(result, proposal) for proposal in inputs]
    at_cycle_zero = [rejection for rejection in result.rejections if rejection.cycle == 0]
    assert len(at_cycle_zero) == verdicts.count("rejected")


@given(
    inputs=inputs_lists,
    formation=formations(always_new=None),
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_run_result_verifies_against_its_integrity_proof(
    inputs: list[ProposedFact], formation: FormationSpec, on_conflict: ConflictMode, seed: int
) -> None:
    result = await run_formation(formation, inputs, on_conflict=on_conflict, seed=seed)
    assert verify(result.context, result.integrity)
    assert result.integrity.fact_count == len(result.context)


@st.composite
def conflicting_inputs(draw: st.DrawFn) -> tuple[list[ProposedFact], ProposedFact, ProposedFact]:
    """Valid inputs holding `first` and, later, `second`: same key and id, other content."""
    first = draw(valid_proposals())
    content = draw(st.text(min_size=1, max_size=8).filter(lambda text: bool(text.strip())))
    assume(content != first.content)
    second = first.model_copy(update={"content": content})
    others = draw(unique_inputs(valid_proposals(), max_size=6))
    others = [p for p in others if (p.key, p.id) != (first.key, first.id)]
    at_first = draw(st.integers(min_value=0, max_value=len(others)))
    at_second = draw(st.integers(min_value=at_first, max_value=len(others)))
    inputs = [*others[:at_first], first, *others[at_first:at_second], second]
    return [*inputs, *others[at_second:]], first, second


@given(case=conflicting_inputs(), formation=formations(always_new=None))
async def test_run_stops_with_conflict_at_cycle_zero_when_two_inputs_conflict(
    case: tuple[list[ProposedFact], ProposedFact, ProposedFact], formation: FormationSpec
) -> None:
    """With `on_conflict="stop"`, the whole input effect is rolled back and no cycle runs."""
    inputs, _, second = case
    result = await run_formation(formation, inputs, on_conflict="stop")
    assert result.stop_reason is StopReason.CONFLICT
    assert result.cycles == 0
    assert result.trace.cycles == ()
    assert len(result.context) == 0
    assert result.conflict is not None
    assert result.conflict.proposal == second


@given(case=conflicting_inputs(), formation=formations(always_new=None))
async def test_run_rejects_the_later_of_two_conflicting_inputs_when_on_conflict_is_reject(
    case: tuple[list[ProposedFact], ProposedFact, ProposedFact], formation: FormationSpec
) -> None:
    inputs, first, second = case
    result = await run_formation(formation, inputs, on_conflict="reject")
    assert accounted_input(result, first) == "fact"
    assert accounted_input(result, second) == "rejected"


@st.composite
def proposals_with_a_lone_surrogate(draw: st.DrawFn) -> ProposedFact | None:
    """A valid proposal with a lone surrogate in one text field; `None` if pydantic refuses it."""
    base = draw(valid_proposals())
    text = draw(surrogate_texts)
    fields = base.model_dump()
    field = draw(
        st.sampled_from(("id", "content", "provenance", "evidence", "payload", "payload key"))
    )
    if field == "evidence":
        fields[field] = (text,)
    elif field == "payload key":
        fields["payload"] = {text: fields["payload"]}
    else:
        fields[field] = text
    try:
        return ProposedFact.model_validate(fields)
    except ValueError:  # pydantic.ValidationError: refusing it at construction is fine too
        return None


@given(proposal=proposals_with_a_lone_surrogate())
async def test_run_accounts_for_an_input_holding_a_lone_surrogate(
    proposal: ProposedFact | None,
) -> None:
    """A lone surrogate cannot be encoded as UTF-8: the input is refused, never a crash."""
    if proposal is None:
        return
    result = await run_formation(FormationSpec(()), [proposal])
    accounted_input(result, proposal)
    assert verify(result.context, result.integrity)


@given(proposal=proposals_with_a_lone_surrogate())
async def test_run_accounts_for_a_suggestor_proposal_holding_a_lone_surrogate(
    proposal: ProposedFact | None,
) -> None:
    """The merge refuses or promotes it like any proposal; the run never raises."""
    if proposal is None:
        return
    formation = FormationSpec((FixedSpec((), None, (proposal,)),))
    result = await run_formation(formation, [])
    fact = result.context.find(proposal.key, proposal.id)
    rejected = [rejection.suggestor for rejection in result.rejections]
    assert (fact is not None and same_claim(fact, proposal)) != (rejected == ["s0"])
    assert verify(result.context, result.integrity)


# -- 6. the Lamport clock ----------------------------------------------------------------------


@given(
    formation=formations(always_new=None),
    inputs=inputs_lists,
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_lamport_clocks_count_one_to_n_in_merge_order_from_an_empty_context(
    formation: FormationSpec, inputs: list[ProposedFact], on_conflict: ConflictMode, seed: int
) -> None:
    """Sorted by clock, facts are the promoted inputs (in input order), then the trace's refs."""
    result = await run_formation(formation, inputs, on_conflict=on_conflict, seed=seed)
    by_clock = sorted(result.context.facts(), key=lambda fact: fact.promotion.clock)
    assert [fact.promotion.clock for fact in by_clock] == list(range(1, len(by_clock) + 1))
    merge_order = input_merge_order(result, inputs) + [
        ref for cycle in result.trace.cycles for ref in cycle.promoted
    ]
    assert [fact.ref for fact in by_clock] == merge_order


@given(
    formation=formations(always_new=None),
    inputs=inputs_lists,
    on_conflict=conflict_modes,
    seed=latency_seeds,
)
async def test_integrity_clock_equals_the_fact_count_from_an_empty_context(
    formation: FormationSpec, inputs: list[ProposedFact], on_conflict: ConflictMode, seed: int
) -> None:
    result = await run_formation(formation, inputs, on_conflict=on_conflict, seed=seed)
    assert result.integrity.clock == len(result.context) == result.context.clock


@given(
    first=formations(always_new=None),
    second=formations(always_new=None),
    first_inputs=inputs_lists,
    second_inputs=inputs_lists,
    on_conflict=conflict_modes,
)
async def test_lamport_clock_continues_from_the_starting_context_clock(
    first: FormationSpec,
    second: FormationSpec,
    first_inputs: list[ProposedFact],
    second_inputs: list[ProposedFact],
    on_conflict: ConflictMode,
) -> None:
    previous = await run_formation(first, first_inputs, on_conflict=on_conflict)
    result = await run_formation(
        second, second_inputs, on_conflict=on_conflict, context=previous.context
    )
    start = previous.integrity.clock
    added = [fact for fact in result.context.facts() if fact.promotion.clock > start]
    assert sorted(fact.promotion.clock for fact in added) == list(
        range(start + 1, start + len(added) + 1)
    )
    assert len(added) == len(result.context) - len(previous.context)
    assert result.integrity.clock == start + len(added)
