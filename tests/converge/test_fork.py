"""Engine.fork: a stored run's context at any cycle, continued live, with its lineage."""

from __future__ import annotations

from pathlib import Path

import pytest
from fork_formation import BIDS, chain_formation

from converge import (
    ContextKey,
    Engine,
    ForkError,
    GateDecision,
    ProposedFact,
    RunRecord,
    SqliteRunStore,
    StopReason,
    StoreError,
)
from converge._kernel._fork import fork_point, lineage_problem

KEY = "fork-test-key"


def _engine(store: SqliteRunStore, *, held: int | None = None, steps: int = 5) -> Engine:
    return chain_formation(steps, held).engine(store=store, signing_key=KEY, record_effects=True)


async def _parent(tmp_path: Path, *, held: int | None = None) -> tuple[Engine, RunRecord]:
    store = SqliteRunStore(tmp_path / "runs.db")
    engine = _engine(store, held=held)
    result = await engine.run()
    return engine, await store.load(result.run_id)


async def test_fork_reaches_the_parents_root_when_forked_at_every_cycle(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    assert parent.stop_reason is StopReason.CONVERGED
    for cycle in range(parent.cycles + 1):
        fork = await engine.fork(parent, at_cycle=cycle)
        assert fork.stop_reason is StopReason.CONVERGED, cycle
        assert fork.integrity == parent.integrity, cycle
        assert fork.lineage is not None
        assert fork.lineage.at_cycle == cycle
        assert fork.lineage.parent_run_id == parent.run_id
        stored = await engine.store.load(fork.run_id)  # type: ignore[union-attr]
        assert stored.lineage == fork.lineage
        assert lineage_problem(stored, parent) is None


async def test_fork_rebuilds_the_context_without_calling_a_suggestor(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    point = fork_point(parent, 3)
    # the seed (cycle 1), steps 1-2 (cycles 2-3), tally 1 (cycle 3) and the input
    assert sorted(f"{f.key}/{f.id}" for f in point.facts) == [
        "evaluations/tally-1",
        "hypotheses/step-1",
        "hypotheses/step-2",
        "seeds/start",
        "signals/go",
    ]
    fork = await engine.fork(parent, at_cycle=3)
    assert next(c.cycle for c in fork.trace.cycles) == 4  # the fork's own cycles only
    assert fork.trace.initial_root == point.root


async def test_fork_of_a_fork_keeps_its_lineage(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    store = engine.store
    assert store is not None
    first = await engine.fork(parent, at_cycle=2, retract=["hypotheses/step-1"], cascade=True)
    first_record = await store.load(first.run_id)
    second = await engine.fork(first_record, at_cycle=4)
    assert second.integrity == first.integrity
    second_record = await store.load(second.run_id)
    assert second_record.lineage is not None
    assert second_record.lineage.parent_run_id == first.run_id
    assert lineage_problem(second_record, first_record) is None


async def test_fork_with_changes_records_them_as_its_inputs(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    bid = ProposedFact(key=BIDS, id="b1", content="a bid", provenance="me", payload={"amount": 3})
    fork = await engine.fork(parent, at_cycle=2, inputs=[bid])
    assert fork.trace.inputs == (bid,)
    made = fork.context.find(BIDS, "b1")
    assert made is not None
    assert made.promotion.cycle == 2
    assert made.promotion.gate == "input"
    step = fork.context.find(ContextKey.HYPOTHESES, "step-3")
    assert step is not None
    assert step.content == "step 3 with 1 bids"
    assert fork.integrity != parent.integrity


async def test_fork_retract_removes_the_fact_and_with_cascade_what_cites_it(
    tmp_path: Path,
) -> None:
    engine, parent = await _parent(tmp_path)
    alone = await engine.fork(parent, at_cycle=4, retract=["tally-1"], inputs=(), cascade=False)
    assert alone.lineage is not None
    assert alone.lineage.retracted_refs == ("evaluations/tally-1",)
    cascaded = await engine.fork(parent, at_cycle=4, retract=["hypotheses/step-2"], cascade=True)
    assert cascaded.lineage is not None
    assert set(cascaded.lineage.retracted_refs) == {
        "hypotheses/step-2",
        "hypotheses/step-3",
        "evaluations/tally-2",
    }  # tally-3 comes in cycle 5
    store = engine.store
    assert store is not None
    assert lineage_problem(await store.load(cascaded.run_id), parent) is None


async def test_fork_of_a_paused_run_before_its_gate_and_at_its_last_cycle(
    tmp_path: Path,
) -> None:
    engine, parent = await _parent(tmp_path, held=2)
    assert parent.stop_reason is StopReason.AWAITING_HUMAN
    gate_cycle = parent.cycles
    before = await engine.fork(parent, at_cycle=gate_cycle - 1)
    assert before.stop_reason is StopReason.AWAITING_HUMAN  # the gate waits again
    assert [g.proposal.ref for g in before.pending] == [g.proposal.ref for g in parent.pending]
    at_last = await engine.fork(parent, at_cycle=gate_cycle)
    assert at_last.stop_reason is StopReason.AWAITING_HUMAN
    # the fork's own gate is decided on the fork, and the lineage survives the resume
    assert at_last.checkpoint is not None
    decision = GateDecision.approve(at_last.pending[0].gate_id, by="jane")
    resumed = await engine.resume(at_last.checkpoint, [decision])
    assert resumed.stop_reason is StopReason.CONVERGED
    assert resumed.lineage == at_last.lineage
    store = engine.store
    assert store is not None
    assert (await store.load(resumed.run_id)).lineage == at_last.lineage


async def test_fork_does_not_carry_the_parents_later_decisions(tmp_path: Path) -> None:
    engine, paused = await _parent(tmp_path, held=2)
    assert paused.checkpoint is not None
    decision = GateDecision.approve(paused.pending[0].gate_id, by="jane")
    resumed = await engine.resume(paused.checkpoint, [decision])
    assert resumed.stop_reason is StopReason.CONVERGED
    store = engine.store
    assert store is not None
    parent = await store.load(resumed.run_id)
    fork = await engine.fork(parent, at_cycle=paused.cycles - 1)
    assert fork.stop_reason is StopReason.AWAITING_HUMAN
    kept = await engine.fork(parent, at_cycle=paused.cycles)  # the decision is in that cycle
    assert kept.integrity == parent.integrity


async def test_fork_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    store = engine.store
    assert store is not None
    before = len(await store.list_runs())
    with pytest.raises(ForkError, match=rf"run {parent.run_id} has no cycle 99: it ran cycles 0"):
        await engine.fork(parent, at_cycle=99)
    with pytest.raises(ForkError, match="has no cycle -1"):
        await engine.fork(parent, at_cycle=-1)
    with pytest.raises(ForkError, match=r"--retract nope: run .* has no such fact at the end of"):
        await engine.fork(parent, at_cycle=3, retract=["nope"])
    with pytest.raises(ForkError, match=r"hypotheses/step-5: run .* no such fact at the end of"):
        await engine.fork(parent, at_cycle=3, retract=["hypotheses/step-5"])
    bad = ProposedFact(key=BIDS, id="b", content="x", provenance="me", payload={"amount": "x"})
    with pytest.raises(ForkError, match=r"inputs\[0\] \(fork_bids/b\): payload does not fit Bid"):
        await engine.fork(parent, at_cycle=3, inputs=[bad])
    assert len(await store.list_runs()) == before


async def test_fork_refuses_a_parent_whose_signature_or_facts_fail(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    forged_fact = parent.facts[0].model_copy(update={"content": "forged"})
    forged = parent.model_copy(update={"facts": (forged_fact, *parent.facts[1:])})
    with pytest.raises(StoreError, match="bad signature"):
        await engine.fork(forged, at_cycle=3)
    unsigned = forged.model_copy(update={"signature": None})
    plain = chain_formation().engine()
    with pytest.raises(ForkError, match=r"seeds/start: digest .* does not match its fields"):
        await plain.fork(unsigned, at_cycle=3)
    redigested = forged_fact.model_copy(update={"digest": "0" * 64})
    moved = unsigned.model_copy(update={"facts": (redigested, *parent.facts[1:])})
    with pytest.raises(ForkError, match="do not hash to its integrity proof"):
        await plain.fork(moved, at_cycle=3)


async def test_fork_with_replay_checks_the_recorded_effects(tmp_path: Path) -> None:
    engine, parent = await _parent(tmp_path)
    fork = await engine.fork(parent, at_cycle=4, replay=True)
    assert fork.integrity == parent.integrity
    assert fork.lineage is not None
    assert fork.lineage.kind == "replay"
