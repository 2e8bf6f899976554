"""Keys of your own: declared once, typed by a model, checked by the gate, ordered and stored."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import assert_type

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from converge import (
    AgentEffect,
    Checkpoint,
    ConfigurationError,
    Context,
    ContextKey,
    ContextSnapshot,
    Engine,
    Formation,
    GateDecision,
    HitlPolicy,
    InvalidCheckpointError,
    InvariantClass,
    InvariantResult,
    Key,
    ProposedFact,
    ReplayError,
    RunRecord,
    SqliteRunStore,
    StopReason,
    key_named,
    known_keys,
)
from converge._report._render import render_report


class Bid(BaseModel):
    model_config = ConfigDict(frozen=True)
    vendor: str
    amount: int


class Score(BaseModel):
    model_config = ConfigDict(frozen=True)
    vendor: str
    points: float


BIDS = Key("t-bids", payload=Bid)
SCORES = Key("t-scores", payload=Score)
APPLES = Key("t-apples", payload=Score)  # sorts before "t-bids" among keys of one's own


class Scorer:
    """Scores every bid once: typed reads, typed proposals."""

    name = "scorer"
    dependencies = (BIDS,)
    writes = (SCORES,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(SCORES) < ctx.count(BIDS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        bids = BIDS.read(ctx)
        assert_type(bids, tuple[Bid, ...])
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=SCORES,
                    id=bid.vendor,
                    content=f"{bid.vendor} scores {100_000 / bid.amount:.2f}",
                    provenance=self.name,
                    payload=Score(vendor=bid.vendor, points=100_000 / bid.amount),
                    evidence=(f"t-bids/{bid.vendor}",),
                )
                for bid in bids
            ]
        )


class CheapestWins:
    """An acceptance invariant over a key of one's own."""

    name = "cheapest-wins"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        scores = SCORES.read(ctx)
        if scores and max(scores, key=lambda s: s.points).vendor != "dune":
            return InvariantResult.violated("dune should win")
        return InvariantResult.ok()


def bid(vendor: str, amount: int | str) -> ProposedFact:
    return ProposedFact(
        key="t-bids",
        id=vendor,
        content=f"{vendor} bids {amount}",
        provenance="input:procurement",
        payload={"vendor": vendor, "amount": amount},
    )


FORMATION = Formation(
    name="typed",
    suggestors=(Scorer(),),
    invariants=(CheapestWins(),),
    inputs=(bid("acme", 420_000), bid("dune", 350_000)),
)


# --- declaring -----------------------------------------------------------------------------------


def test_a_key_is_its_name_and_resolves_from_it() -> None:
    assert BIDS == "t-bids"
    assert BIDS.value == "t-bids"
    assert str(BIDS) == "t-bids"
    assert repr(BIDS) == "Key('t-bids', payload=Bid)"
    assert key_named("t-bids") is BIDS
    assert key_named("seeds") is ContextKey.SEEDS
    assert pickle.loads(pickle.dumps(BIDS)) is BIDS
    assert (
        ProposedFact(
            key="t-bids", id="x", content="c", provenance="p", payload={"vendor": "x", "amount": 1}
        ).key
        is BIDS
    )
    with pytest.raises(ValueError, match="unknown context key 't-ghosts'"):
        key_named("t-ghosts")


@pytest.mark.parametrize(
    ("name", "model", "said"),
    [
        ("t-bids", Score, "two keys named 't-bids'"),
        ("seeds", Bid, "the name of a built-in ContextKey"),
        ("Bids", Bid, "lower-case"),
        ("a/b", Bid, "lower-case"),
        ("", Bid, "lower-case"),
    ],
)
def test_a_bad_declaration_is_a_configuration_error(
    name: str, model: type[BaseModel], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        Key(name, payload=model)


def test_the_model_must_be_frozen_and_a_pydantic_model() -> None:
    class Loose(BaseModel):
        amount: int

    with pytest.raises(ConfigurationError, match="must be frozen"):
        Key("loose", payload=Loose)
    with pytest.raises(ConfigurationError, match="pydantic model class"):
        Key("plain", payload=dict)  # pyright: ignore[reportArgumentType]


def test_declaring_the_same_key_again_with_the_same_model_gives_the_same_key() -> None:
    assert Key("t-bids", payload=Bid) is BIDS

    class Bid2(BaseModel):  # another class, another schema: another model
        model_config = ConfigDict(frozen=True)
        vendor: str

    with pytest.raises(ConfigurationError, match="two keys named 't-bids'"):
        Key("t-bids", payload=Bid2)


# --- running -------------------------------------------------------------------------------------


def test_typed_payloads_flow_through_a_run_and_read_back_as_frozen_models() -> None:
    result = FORMATION.run_sync()
    assert result.stop_reason is StopReason.CONVERGED
    scores = SCORES.read(result.context)
    assert [(s.vendor, round(s.points, 3)) for s in scores] == [("acme", 0.238), ("dune", 0.286)]
    assert all(isinstance(s, Score) for s in scores)
    with pytest.raises(ValidationError):
        scores[0].points = 1.0
    fact = result.context.find(SCORES, "dune")
    assert fact is not None
    assert SCORES.of(fact) == Score(vendor="dune", points=100_000 / 350_000)
    with pytest.raises(ValueError, match="is not under key 't-bids'"):
        BIDS.of(fact)


def test_the_gate_rejects_a_payload_that_does_not_fit_the_model_with_pydantics_words() -> None:
    result = FORMATION.run_sync(inputs=(bid("acme", "a lot"), bid("dune", 350_000)))
    [rejection] = result.rejections
    assert rejection.proposal.ref == "t-bids/acme"
    assert rejection.reason == (
        "payload does not fit Bid, the model of key t-bids: amount: Input should be a valid integer"
    )
    numeric_text = FORMATION.run_sync(inputs=(bid("acme", "42"),))
    assert "amount: Input should be a valid integer" in numeric_text.rejections[0].reason
    assert [f.ref for f in result.context.get(BIDS)] == ["t-bids/dune"]
    missing = ProposedFact(key=BIDS, id="x", content="no payload", provenance="p")
    result = FORMATION.run_sync(inputs=(missing,))
    assert "payload does not fit Bid" in result.rejections[0].reason


def test_a_staged_proposal_for_a_typed_key_is_checked_against_the_targets_model() -> None:
    staged = ProposedFact(
        key=ContextKey.PROPOSALS,
        id="bid",
        content="a staged bid",
        provenance="p",
        target=BIDS,
        payload={"vendor": "x"},
    )
    result = FORMATION.run_sync(inputs=(staged,))
    assert "amount: Field required" in result.rejections[0].reason


def test_keys_of_ones_own_follow_the_built_in_keys_in_name_order() -> None:
    apple = ProposedFact(
        key=APPLES,
        id="a",
        content="an apple",
        provenance="p",
        payload=Score(vendor="a", points=1.0),
    )
    seed = ProposedFact(key=ContextKey.SEEDS, id="s", content="seed", provenance="p")
    diag = ProposedFact(key=ContextKey.DIAGNOSTIC, id="d", content="note", provenance="p")
    result = FORMATION.run_sync(inputs=(bid("dune", 1), apple, diag, seed))
    assert [str(key) for key in result.context.keys()] == [
        "seeds",
        "diagnostic",
        "t-apples",
        "t-bids",
        "t-scores",
    ]
    again = FORMATION.run_sync(inputs=(apple, bid("dune", 1), diag, seed))
    assert again.context.keys() == result.context.keys()
    assert [f.ref for f in again.context.facts()] == [f.ref for f in result.context.facts()]


def test_a_typo_in_a_key_name_is_an_error_not_an_empty_answer() -> None:
    context = FORMATION.run_sync().context
    assert context.count("t-bids") == 2
    assert context.get("t-scores")[0].key is SCORES
    with pytest.raises(ValueError, match="unknown context key 't-bid'"):
        context.get("t-bid")
    with pytest.raises(ValueError, match="unknown context key 't-bid'"):
        context.has("t-bid")
    assert ContextSnapshot.empty().count(BIDS) == 0


def test_every_reader_answers_alike_for_a_key_without_facts_of_either_kind() -> None:
    """A built-in key has an empty store from the start, a declared one only from its first
    fact: `find`, `get`, `count` and `has` answer the same for both, by key or by name, and
    a typo is an error in each."""
    seed = ProposedFact(key=ContextKey.SEEDS, id="s", content="seed", provenance="p")
    seeds_only = Engine().run_sync(inputs=[seed]).context
    for context in (ContextSnapshot.empty(), seeds_only):
        for key in (ContextKey.HYPOTHESES, "hypotheses", BIDS, "t-bids"):
            assert context.find(key, "x") is None
            assert list(context.get(key)) == []
            assert context.count(key) == 0
            assert context.has(key) is False
        for reader in (context.get, context.count, context.has):
            with pytest.raises(ValueError, match="unknown context key 't-bid'"):
                reader("t-bid")
        with pytest.raises(ValueError, match="unknown context key 't-bid'"):
            context.find("t-bid", "x")
    assert seeds_only.keys() == (ContextKey.SEEDS,)
    assert seeds_only.has("seeds")
    assert seeds_only.find("seeds", "s") is not None
    bids_only = Engine().run_sync(inputs=[bid("dune", 1)]).context
    assert bids_only.keys() == (BIDS,)
    assert not bids_only.has(ContextKey.SEEDS)
    assert [f.id for f in bids_only.get("t-bids")] == [f.id for f in bids_only.facts()]


def test_a_key_declared_after_a_snapshot_began_reads_empty_then_sorts_in_key_order() -> None:
    """A snapshot has a store for every key known when its line began; a key declared later
    gets one with its first fact, and the keys stay in key order."""
    start = ContextSnapshot.empty()
    late = Key("t-aaa-late", payload=Score)  # declared after `start`; sorts before "t-bids"
    assert start.find(late, "x") is None
    assert start.find("t-aaa-late", "x") is None
    assert list(start.get(late)) == []
    assert start.count(late) == 0
    assert start.has(late) is False
    note = ProposedFact(
        key=late, id="l", content="late", provenance="p", payload=Score(vendor="a", points=1.0)
    )
    context = Engine().run_sync(context=start, inputs=[bid("dune", 1), note]).context
    assert context.keys() == (late, BIDS)
    assert context.find(late, "l") is not None
    assert [f.ref for f in context.facts()] == ["t-aaa-late/l", "t-bids/dune"]


# --- stored, paused, resumed, replayed ----------------------------------------------------------


async def test_a_gated_key_of_ones_own_pauses_stores_and_resumes(tmp_path: Path) -> None:
    store = SqliteRunStore(f"{tmp_path}/runs.db")
    gated = Formation(
        name="gated",
        suggestors=(Scorer(),),
        inputs=FORMATION.inputs,
        hitl=HitlPolicy(gated_keys=frozenset({SCORES})),
    )
    paused = await gated.run(store=store)
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert [g.proposal.key for g in paused.pending] == [SCORES, SCORES]
    checkpoint = paused.checkpoint
    assert isinstance(checkpoint, Checkpoint)
    assert Checkpoint.model_validate_json(checkpoint.model_dump_json()) == checkpoint
    stored = await store.load(paused.run_id)
    assert stored.facts[0].key is BIDS
    decisions = [GateDecision.approve(g.gate_id, by="ana") for g in paused.pending]
    resumed = await gated.engine(store=store).resume_run(paused.run_id, decisions)
    assert resumed.stop_reason is StopReason.CONVERGED
    assert [f.ref for f in resumed.context.get(SCORES)] == ["t-scores/acme", "t-scores/dune"]
    record = await store.load(paused.run_id)
    assert record.restore_context().merkle_root() == resumed.integrity.merkle_root
    replayed = await gated.engine().replay(record.trace)
    assert replayed.integrity == record.integrity
    page = render_report(record)
    assert 'data-key="t-scores"' in page
    assert 'data-key="t-bids"' in page


GHOSTS = textwrap.dedent(
    """
    from pydantic import BaseModel, ConfigDict
    from converge import AgentEffect, Context, Formation, HitlPolicy, Key, ProposedFact

    class Ghost(BaseModel):
        model_config = ConfigDict(frozen=True)
        name: str

    HAUNTS = Key("t-haunts", payload=Ghost)

    class Haunter:
        name = "haunter"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return not ctx.has(HAUNTS)

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(ProposedFact(
                key=HAUNTS, id="boo", content="a ghost", provenance="p",
                payload=Ghost(name="boo")))

    formation = Formation(
        name="ghosts",
        suggestors=(Haunter(),),
        hitl=HitlPolicy(gated_keys=frozenset({HAUNTS})),
    )
    """
)


def test_a_run_naming_a_key_this_process_never_declared_shows_but_does_not_run(
    tmp_path: Path,
) -> None:
    from tests.cli_runs import cli, run_id_of

    formation = tmp_path / "ghosts.py"
    formation.write_text(GHOSTS)
    store = str(tmp_path / "runs.db")
    done = subprocess.run(
        [sys.executable, "-m", "converge.cli", "--store", store, "run", str(formation)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 6, done.stderr
    run_id = run_id_of(done.stdout)
    assert "t-haunts" not in {str(key) for key in known_keys()}  # never declared here
    code, out = cli("--store", store, "show", run_id)
    assert code == 0
    assert "t-haunts" in out
    assert cli("--store", store, "verify", run_id)[0] == 0
    assert cli("--store", store, "review", run_id)[0] == 6
    record = anyio.run(SqliteRunStore(store).load, run_id)
    assert "t-haunts/boo" in render_report(record)  # the held proposal
    with pytest.raises(ValidationError, match="unknown context key 't-haunts'"):
        RunRecord.model_validate_json(record.model_dump_json())  # strict outside a store

    gate = record.pending[0].gate_id
    decision = [GateDecision.approve(gate, by="ana")]
    with pytest.raises(InvalidCheckpointError, match=r"not declared: \['t-haunts'\]"):
        Engine(store=SqliteRunStore(store)).resume_run_sync(run_id, decision)
    with pytest.raises(ReplayError, match=r"not declared: \['t-haunts'\]"):
        anyio.run(Engine().replay, record.trace)
    # a process that imports the formation declares the key and resumes the run
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "converge.cli",
            "--store",
            store,
            "resume",
            run_id,
            "--approve",
            gate,
            "--by",
            "ana",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for command in ("replay", "verify"):
        done = subprocess.run(
            [sys.executable, "-m", "converge.cli", "--store", store, command, run_id],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_keys_in_dependencies_writes_and_gated_keys_may_be_names() -> None:
    class ByName:
        name = "by-name"
        dependencies: Sequence[str] = ("t-bids",)
        writes: Sequence[str] = ("t-scores",)

        def accepts(self, ctx: Context, /) -> bool:
            return not ctx.has("t-scores")

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposals(
                [
                    ProposedFact(
                        key="t-scores",
                        id="all",
                        content="scored",
                        provenance=self.name,
                        payload={"vendor": "all", "points": 1},
                    )
                ]
            )

    formation = Formation(name="names", suggestors=(ByName(),), inputs=FORMATION.inputs)
    result = formation.run_sync()
    assert [f.ref for f in result.context.get(SCORES)] == ["t-scores/all"]


def test_the_validation_agent_promotes_a_staged_proposal_into_a_key_of_ones_own() -> None:
    from converge_suggestors import ValidationAgent

    assert BIDS in ValidationAgent().writes
    staged = ProposedFact(
        key=ContextKey.PROPOSALS,
        id="bid",
        content="a staged bid",
        provenance="p",
        target=BIDS,
        payload=Bid(vendor="zed", amount=10),
        confidence=0.9,
    )
    formation = Formation(name="staged", suggestors=(ValidationAgent(),), inputs=(staged,))
    result = formation.run_sync()
    assert [(b.vendor, b.amount) for b in BIDS.read(result.context)] == [("zed", 10)]


# --- joins ---------------------------------------------------------------------------------------


def test_ready_says_a_join_without_counting() -> None:
    from converge import missing, ready

    context = FORMATION.run_sync(inputs=(bid("acme", 1), bid("dune", 2))).context
    assert ContextKey.SEEDS / "goal" == "seeds/goal"
    assert BIDS / "acme" == "t-bids/acme"
    bids = [BIDS / "acme", BIDS / "dune"]
    assert ready(context, needs=bids, makes=ContextKey.STRATEGIES / "pick")
    assert not ready(context, needs=bids, makes=SCORES / "acme")  # made already
    assert ready(context, needs=bids, makes=[SCORES / "acme", SCORES / "zed"])  # one is not
    assert not ready(context, needs=[*bids, BIDS / "zed"], makes=ContextKey.STRATEGIES / "pick")
    assert ready(context, needs=[], makes=ContextKey.STRATEGIES / "pick")
    assert missing(context, [BIDS / "zed", BIDS / "acme", SCORES / "x"]) == (
        "t-bids/zed",
        "t-scores/x",
    )
    with pytest.raises(ValueError, match="must name the fact"):
        ready(context, needs=bids, makes=[])
    with pytest.raises(ValueError, match="a fact reference is 'key/id', got 'acme'"):
        ready(context, needs=["acme"], makes="seeds/x")
    with pytest.raises(ValueError, match="unknown context key 'nope'"):
        missing(context, ["nope/x"])
