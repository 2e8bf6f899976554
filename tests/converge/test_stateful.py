"""The loop driven step by step: register suggestors, add inputs, run from the last context.

After every step the `@invariant()` methods restate what the engine promises about every run.
"""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from converge import (
    Budget,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Engine,
    Fact,
    ProposedFact,
    Suggestor,
    verify,
)
from tests.strategies import (
    AlwaysNew,
    ConflictMode,
    FixedProposals,
    Latency,
    ReactOnce,
    SeedOnce,
    colliding_proposals,
    conflict_modes,
    contents,
    fact_keys,
    keys,
    proposals,
    valid_ids,
)

Backend = Literal["asyncio", "trio"]
NO_DELAY = Latency()


class EngineMachine(RuleBasedStateMachine):
    """Grows one engine and one context; each `run` starts from the previous run's context."""

    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine()
        self.max_cycles = Budget().max_cycles
        self.names = 0
        self.always_new = 0
        self.pending: list[ProposedFact] = []
        self.context = ContextSnapshot.empty()
        self.before: tuple[Fact, ...] = ()
        self.last: ConvergeResult | None = None
        self.rerun_checked = ""
        self.registered_since_run = False
        self.settled = False
        """Whether the last result is a fixed point of every registered suggestor (see `run`)."""

    def _register(self, suggestor: Suggestor) -> None:
        self.engine.register_suggestor(suggestor)
        self.registered_since_run = True

    def _name(self, kind: str) -> str:
        self.names += 1
        return f"{kind}-{self.names}"

    @initialize(
        on_conflict=conflict_modes,
        max_concurrency=st.sampled_from((None, 1, 3)),
        max_cycles=st.integers(min_value=1, max_value=6),
    )
    def build_engine(
        self, on_conflict: ConflictMode, max_concurrency: int | None, max_cycles: int
    ) -> None:
        self.max_cycles = max_cycles
        self.engine = Engine(
            budget=Budget(max_cycles=max_cycles, max_facts=500),
            max_concurrency=max_concurrency,
            on_conflict=on_conflict,
        )

    # -- rules -----------------------------------------------------------------------------------

    @rule(key=fact_keys, fact_id=valid_ids, content=contents)
    def add_seed(self, key: ContextKey, fact_id: str, content: str) -> None:
        self._register(SeedOnce(self._name("seed"), key, fact_id, content, NO_DELAY))

    @rule(source=fact_keys, into=fact_keys, fact_id=valid_ids, content=contents)
    def add_reaction(
        self, source: ContextKey, into: ContextKey, fact_id: str, content: str
    ) -> None:
        self._register(ReactOnce(self._name("react"), source, into, fact_id, content, NO_DELAY))

    @rule(
        dependencies=st.lists(keys, max_size=2, unique=True),
        facts=st.lists(st.one_of(colliding_proposals, proposals), min_size=1, max_size=4),
    )
    def add_fixed_proposals(
        self, dependencies: list[ContextKey], facts: list[ProposedFact]
    ) -> None:
        self._register(
            FixedProposals(self._name("fixed"), tuple(dependencies), None, tuple(facts), NO_DELAY)
        )

    @precondition(lambda self: self.always_new < 2)
    @rule(key=keys)
    def add_always_new(self, key: ContextKey) -> None:
        self.always_new += 1
        self._register(AlwaysNew(self._name("new"), key, NO_DELAY))

    @rule(proposal=st.one_of(colliding_proposals, proposals))
    def add_input(self, proposal: ProposedFact) -> None:
        self.pending.append(proposal)

    @rule(backend=st.sampled_from(("asyncio", "trio")))
    def run(self, backend: Backend) -> None:
        """Run from the last context.

        Cycle 1 considers only the keys the inputs added (every key holding facts if they
        added none). So a converged run is a fixed point of every registered suggestor only
        if it started from one: the empty context, or a converged context with no suggestor
        registered since, or inputs that added nothing (a full pass).
        """
        start = self.context
        started_settled = len(start) == 0 or (self.settled and not self.registered_since_run)
        self.before = start.facts()
        result = self.engine.run_sync(start, inputs=self.pending, backend=backend)
        inputs_added = any(
            fact.promotion.gate == "input" and fact.promotion.clock > start.clock
            for fact in result.context.facts()
        )
        self.pending = []
        self.registered_since_run = False
        self.context = result.context
        self.last = result
        self.settled = result.converged and (started_settled or not inputs_added)
        event(f"run stopped: {result.stop_reason.value}")
        if self.settled:
            event("run reached a fixed point of every registered suggestor")

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def facts_only_grow(self) -> None:
        for fact in self.before:
            assert self.context.find(fact.key, fact.id) == fact
        for key in ContextKey:
            old = tuple(fact for fact in self.before if fact.key is key)
            assert tuple(self.context.get(key))[: len(old)] == old

    @invariant()
    def ids_are_unique_per_key(self) -> None:
        for key in ContextKey:
            ids = [fact.id for fact in self.context.get(key)]
            assert len(ids) == len(set(ids)), key

    @invariant()
    def facts_have_non_blank_content_and_provenance(self) -> None:
        for fact in self.context.facts():
            assert fact.content.strip(), fact
            assert fact.provenance.strip(), fact

    @invariant()
    def context_verifies_against_the_last_proof(self) -> None:
        if self.last is not None:
            assert verify(self.context, self.last.integrity)

    @invariant()
    def cycles_stay_within_max_cycles(self) -> None:
        if self.last is not None:
            assert self.last.cycles <= self.max_cycles
            assert len(self.last.trace.cycles) <= self.max_cycles

    @invariant()
    def converged_result_converges_again_in_one_cycle(self) -> None:
        last = self.last
        if last is None or not self.settled or self.rerun_checked == last.run_id:
            return
        self.rerun_checked = last.run_id
        again = self.engine.run_sync(last.context)
        assert again.converged, again
        assert again.cycles == 1
        assert again.integrity == last.integrity


TestEngineMachine = pytest.mark.slow(EngineMachine.TestCase)
TestEngineMachine.settings = settings(max_examples=100, stateful_step_count=25)
