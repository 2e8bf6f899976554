"""Tamper evidence: a fact changed below the API never ends a saved or signed run `converged`,
is never signed, and the stored record of it never verifies.

Attack H: a suggestor rewrites a promoted fact's fields through its `__dict__`, or its frozen
payload in place, with or without its digest recomputed: found. Attack I: it also rewrites
the leaf the context kept for it (the engine's own state, below the API): past what the
process finds by itself, and replay of the recorded effects finds it (the documented line).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    ConvergeResult,
    Durability,
    Engine,
    Fact,
    HitlPolicy,
    InvariantClass,
    ProposedFact,
    ReplayError,
    RunRecord,
    SqliteRunStore,
    StopReason,
    StoreError,
    verify,
)
from converge._core._checkpoint import restore_fact
from converge._core._sequence import FactStore
from converge._kernel._state import RunState
from converge.stores._journal import CycleDelta, Journal
from converge_suggestors import SeedSuggestor

SEEDS = ContextKey.SEEDS
H = ContextKey.HYPOTHESES
S = ContextKey.STRATEGIES
KEY = b"a signing key"


def goal() -> ProposedFact:
    """The seed, its payload its own (the payload attack changes it in place)."""
    return ProposedFact(
        key=SEEDS, id="goal", content="Grow revenue.", provenance="me", payload={"target": 10}
    )


def public_leaf(fact: Fact) -> bytes:
    """The leaf the public hashing rules give for a fact's fields (integrity.md)."""
    record = fact.model_dump(mode="json")
    record.pop("digest")
    text = json.dumps(
        record, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(b"\x00" + text.encode("utf-8")).digest()


def store_of(context: Context, fact: Fact) -> FactStore:
    """The store a snapshot keeps `fact` in (the engine's own state, below the API)."""
    assert isinstance(context, ContextSnapshot)
    return context._stores[fact.key]  # pyright: ignore[reportPrivateUsage]


def rewrite(fact: Fact, how: str, context: Context) -> None:
    """Change a promoted fact below the API, `how` far."""
    fields: dict[str, Any] = vars(fact)
    if how == "payload":
        dict[str, Any].__setitem__(fields["payload"], "target", 1)
        return
    dict[str, Any].__setitem__(fields, "content", "Cut costs.")
    if how == "fields":
        return
    leaf = public_leaf(fact)
    dict[str, Any].__setitem__(fields, "digest", leaf)
    if how == "fields and digest":
        return
    store = store_of(context, fact)
    store.leaves[store.facts.index(fact)] = leaf  # "fields, digest and kept leaf"


HOW = ("fields", "payload", "fields and digest")
"""The changes the engine finds: the fact's own fields against the leaf it kept."""


class Rewriter:
    """In cycle 1, changes the seed fact below the API; proposes one hypothesis."""

    name = "rewriter"
    dependencies = (SEEDS,)

    def __init__(self, how: str) -> None:
        self.how = how

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(H)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        fact = ctx.find(SEEDS, "goal")
        assert fact is not None
        rewrite(fact, self.how, ctx)
        return AgentEffect.with_proposal(
            ProposedFact(key=H, id="h", content="A hypothesis.", provenance=self.name)
        )


def ended_on_integrity(result: ConvergeResult) -> None:
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.detail.startswith("integrity: ")
    assert not verify(result.context, result.integrity)
    if result.cycles:  # recorded in the last cycle's trace (a run stopped at 0 has none)
        [found] = [v for v in result.violations if v.invariant == "integrity"]
        assert found.invariant_class is InvariantClass.ACCEPTANCE
        assert f"integrity: {found.reason}" == result.detail


@pytest.mark.parametrize("how", HOW)
def test_a_fact_changed_below_the_api_does_not_end_a_signed_run_converged(how: str) -> None:
    engine = Engine(signing_key=KEY)
    engine.register_suggestor(Rewriter(how))
    result = engine.run_sync(inputs=[goal()])
    ended_on_integrity(result)
    assert result.detail == (
        "integrity: fact seeds/goal was changed after its promotion: its fields no "
        "longer give the leaf digest the engine kept for it"
    )


@pytest.mark.parametrize("how", HOW)
def test_a_run_that_stays_in_memory_is_not_checked_at_its_end_but_never_verifies(
    how: str,
) -> None:
    """Without a store or a key nothing leaves the process: the result is as open to the
    process's code as the facts are, and `verify` is the check (the documented line)."""
    engine = Engine()
    engine.register_suggestor(Rewriter(how))
    result = engine.run_sync(inputs=[goal()])
    assert result.stop_reason is StopReason.CONVERGED
    assert not verify(result.context, result.integrity)


@pytest.mark.parametrize("durability", ["cycle", "exit"])
@pytest.mark.parametrize("how", HOW)
def test_a_fact_changed_below_the_api_is_never_signed_and_never_verifies(
    tmp_path: Path, how: str, durability: Durability
) -> None:
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(store=store, signing_key=KEY, durability=durability)
    engine.register_suggestor(Rewriter(how))
    result = engine.run_sync(inputs=[goal()])
    ended_on_integrity(result)
    loaded = anyio.run(store.load, result.run_id)
    assert loaded.stop_reason is StopReason.INVARIANT_VIOLATED
    assert loaded.detail == result.detail
    assert loaded.signature is None  # the engine does not vouch for what it did not promote
    with pytest.raises(StoreError, match="unsigned"):
        loaded.verify_signature(KEY)
    with pytest.raises(StoreError):
        verify(loaded.restore_context(), loaded.integrity)  # restore itself refuses


def test_a_run_saved_whole_saves_the_record_its_end_checked(tmp_path: Path) -> None:
    """With `durability="exit"` the record reuses the records the run's end made as it
    checked the facts: the same record `RunRecord.of` builds, signed alike."""
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(store=store, signing_key=KEY, durability="exit")
    engine.register_suggestor(SeedSuggestor("more", "payload"))
    result = engine.run_sync(inputs=[goal()])
    assert result.stop_reason is StopReason.CONVERGED
    saved = RunRecord.saved(result)
    assert saved is not None
    built = RunRecord.of(result, key=KEY)
    assert saved.model_dump_json() == built.model_dump_json()
    loaded = anyio.run(store.load, result.run_id)
    loaded.verify_signature(KEY)
    assert loaded.facts == built.facts


def test_a_fact_changed_after_the_run_is_caught_when_its_record_is_built() -> None:
    result = Engine().run_sync(inputs=[goal()])
    assert result.stop_reason is StopReason.CONVERGED
    fact = result.context.find(SEEDS, "goal")
    assert fact is not None
    rewrite(fact, "fields and digest", result.context)
    record = RunRecord.of(result, key=KEY)
    assert record.stop_reason is StopReason.INVARIANT_VIOLATED
    assert record.trace.stop_reason is StopReason.INVARIANT_VIOLATED
    assert record.detail.startswith("integrity: fact seeds/goal was changed")
    assert record.signature is None
    with pytest.raises(StoreError, match="does not match"):
        record.restore_context()


def test_the_record_of_a_changed_fact_names_it_and_can_be_read_back() -> None:
    engine = Engine()
    engine.register_suggestor(Rewriter("fields"))
    result = engine.run_sync(inputs=[goal()])
    fact = result.context.find(SEEDS, "goal")
    assert fact is not None
    dict[str, Any].__setitem__(vars(fact), "content", 5)  # not even a text any more
    dict[str, Any].__setitem__(vars(fact), "evidence", [None])
    record = RunRecord.model_validate_json(RunRecord.of(result).model_dump_json())
    [stored] = [fact for fact in record.facts if fact.id == "goal"]
    assert (stored.content, stored.evidence) == ("5", ("None",))
    with pytest.raises(StoreError, match=r"facts\[0\]: fact seeds/goal: digest .* does not match"):
        record.restore_context()


class Gated:
    """Proposes one strategy a human must decide, once the hypothesis exists."""

    name = "gated"
    dependencies = (H,)

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(S)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(key=S, id="plan", content="Spend.", provenance=self.name)
        )


@pytest.mark.parametrize("how", HOW)
def test_a_run_whose_fact_changed_does_not_pause_with_a_signed_checkpoint(how: str) -> None:
    engine = Engine(hitl=HitlPolicy(gated_keys=frozenset({S})), signing_key=KEY)
    engine.register_suggestor(Rewriter(how))
    engine.register_suggestor(Gated())
    result = engine.run_sync(inputs=[goal()])
    ended_on_integrity(result)
    assert (result.pending, result.checkpoint) == ((), None)


@pytest.mark.parametrize("how", HOW)
def test_a_context_changed_between_runs_fails_the_run_that_continues_it(how: str) -> None:
    first = Engine().run_sync(inputs=[goal()])
    fact = first.context.find(SEEDS, "goal")
    assert fact is not None
    rewrite(fact, how, first.context)
    seed = ProposedFact(key=H, id="next", content="Then this.", provenance="me")
    ended_on_integrity(Engine(signing_key=KEY).run_sync(first.context, inputs=[seed]))


@pytest.mark.parametrize("how", HOW)
def test_a_durable_run_from_a_changed_context_is_never_signed(tmp_path: Path, how: str) -> None:
    first = Engine().run_sync(inputs=[goal()])
    fact = first.context.find(SEEDS, "goal")
    assert fact is not None
    rewrite(fact, how, first.context)
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(store=store, signing_key=KEY)
    result = engine.run_sync(first.context)
    ended_on_integrity(result)
    loaded = anyio.run(store.load, result.run_id)
    assert (loaded.stop_reason, loaded.signature) == (StopReason.INVARIANT_VIOLATED, None)


@pytest.mark.parametrize("how", ["fields", "payload", "fields and digest"])
def test_a_per_cycle_save_of_a_changed_fact_keeps_its_leaf_and_is_not_signed(how: str) -> None:
    first = Engine().run_sync(inputs=[goal()])
    fact = first.context.find(SEEDS, "goal")
    assert fact is not None
    kept = bytes.fromhex(fact.digest)
    journal = Journal("run", ((), ()), name=None, formation=None, key=KEY)
    signed = journal.progress(RunState.start(first.context, ()), elapsed=0.0, lease_seconds=9.0)
    assert signed.head.signature is not None  # nothing changed: signed
    rewrite(fact, how, first.context)
    journal = Journal("run", ((), ()), name=None, formation=None, key=KEY)
    state = RunState.start(first.context, ())
    progress = journal.progress(state, elapsed=0.0, lease_seconds=9.0)
    assert progress.head.signature is None
    assert progress.entry is not None
    [record] = CycleDelta.model_validate_json(progress.entry).facts
    assert record.digest == kept.hex()  # the leaf kept at promotion, not the fact's own
    assert fact.digest != kept.hex() or how != "fields and digest"
    with pytest.raises(ValueError, match="does not match its fields"):
        restore_fact(record)


def test_kept_leaves_rewritten_as_well_are_past_the_process_and_replay_finds_them(
    tmp_path: Path,
) -> None:
    """Attack I: fields, digest and the context's kept leaf rewritten together. The process
    cannot tell (it is the engine's own state that changed), so the record is signed with
    the forged fact; replaying the recorded effects gives another root, and says so."""
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(store=store, signing_key=KEY, record_effects=True, durability="exit")
    engine.register_suggestor(Rewriter("fields, digest and kept leaf"))
    result = engine.run_sync(inputs=[goal()])
    assert result.stop_reason is StopReason.CONVERGED
    loaded = anyio.run(store.load, result.run_id)
    loaded.verify_signature(KEY)
    assert verify(loaded.restore_context(), loaded.integrity)
    replayer = Engine(record_effects=True)
    replayer.register_suggestor(Rewriter("fields"))
    with pytest.raises(ReplayError, match="gives root"):
        anyio.run(replayer.replay, loaded.trace)


def test_kept_leaves_rewritten_after_a_cycle_was_saved_never_verify_from_its_rows(
    tmp_path: Path,
) -> None:
    """Attack I against a run saved after every cycle: its journal kept the fact as it was
    promoted, and the record is built from the journal, so the store holds that fact, not
    the forged one; the root the process computed over the forged leaf does not fit it,
    and the store's record never verifies."""
    store = SqliteRunStore(str(tmp_path / "runs.db"))
    engine = Engine(store=store, signing_key=KEY)
    engine.register_suggestor(Rewriter("fields, digest and kept leaf"))
    result = engine.run_sync(inputs=[goal()])
    assert result.stop_reason is StopReason.CONVERGED
    forged = result.context.find(SEEDS, "goal")
    assert forged is not None
    assert forged.content == "Cut costs."
    loaded = anyio.run(store.load, result.run_id)
    [stored] = [fact for fact in loaded.facts if fact.id == "goal"]
    assert stored.content == goal().content  # as promoted
    restore_fact(stored)  # the fact fits its own digest
    with pytest.raises(StoreError, match="not to the recorded Merkle root"):
        loaded.restore_context()  # the root was computed over the forged leaf


TAMPERING = """
from typing import Any

from converge import AgentEffect, Context, ContextKey, Formation, ProposedFact
from converge_suggestors import SeedSuggestor


class Tamperer:
    name = "tamperer"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context) -> bool:
        return not ctx.has(ContextKey.HYPOTHESES)

    async def execute(self, ctx: Context) -> AgentEffect:
        fact = ctx.find(ContextKey.SEEDS, "budget")
        fields: dict[str, Any] = vars(fact)
        dict.__setitem__(fields, "content", "Spend everything.")
        return AgentEffect.with_proposal(
            ProposedFact(key=ContextKey.HYPOTHESES, id="h", content="Later.", provenance="t")
        )


formation = Formation(
    name="tampering", suggestors=(SeedSuggestor("budget", "Spend little."), Tamperer())
)
"""


def test_the_command_never_reports_a_tampered_run_converged_nor_verified(tmp_path: Path) -> None:
    formation = tmp_path / "tampering.py"
    formation.write_text(TAMPERING, encoding="utf-8")
    store = str(tmp_path / "runs.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def converge(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "converge.cli", "--store", store, *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, check=False)

    ran = converge("run", str(formation), "--json")
    record = json.loads(ran.stdout)
    assert ran.returncode == 4  # invariant_violated
    assert record["stop_reason"] == "invariant_violated"
    assert record["detail"].startswith("integrity: fact seeds/budget was changed")
    verified = converge("verify", record["run_id"])
    assert verified.returncode == 7
    assert "seeds/budget" in verified.stdout + verified.stderr
