"""Trust in what is stored: everything a suggestor, a model or a human hands the engine is
made storable, and a record that was saved can always be read back.

Attack E: text that cannot be stored (a lone surrogate, as `json.loads('"\\ud800"')` gives from
a model's output; NUL, which PostgreSQL text refuses) in an exception, a name, metadata, a
reason. Attack F: an effect built around validation, whose invalid parts reach the trace.
Attack G: an oversized field, refused by the gate but stored over and over.
"""

from __future__ import annotations

import gc
import json
import math
import os
import sqlite3
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Final, cast

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    GateDecision,
    HitlPolicy,
    Invariant,
    InvariantClass,
    InvariantResult,
    PostgresRunStore,
    ProposedFact,
    Refusal,
    RunRecord,
    RunStore,
    SqliteRunStore,
    StopReason,
    verify,
)
from tests.cli_runs import cli

H = ContextKey.HYPOTHESES
S = ContextKey.STRATEGIES
SURROGATE = json.loads('"\\ud800"')
DATABASE_URL = os.environ.get("DATABASE_URL")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RunStore:
    if request.param == "sqlite":
        return SqliteRunStore(str(tmp_path / "runs.db"))
    if not DATABASE_URL:
        if os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1":
            pytest.fail("CONVERGE_REQUIRE_SERVICES=1 but DATABASE_URL is not set")
        pytest.skip("PostgreSQL store tests need a server: set DATABASE_URL=postgresql://...")
    return PostgresRunStore(DATABASE_URL)


async def read_back(store: RunStore, result: ConvergeResult) -> RunRecord:
    """The stored record of `result`, loaded, read from its own JSON, restored and verified."""
    loaded = await store.load(result.run_id)
    again = RunRecord.model_validate_json(loaded.model_dump_json())
    assert again.model_dump_json() == loaded.model_dump_json()
    assert verify(loaded.restore_context(), loaded.integrity)
    assert loaded.integrity == result.integrity
    return loaded


class Once:
    """Runs in the first cycle only, doing what it was given."""

    dependencies = ()

    def __init__(self, name: str, act: Callable[[], object]) -> None:
        self.name = name
        self._act = act

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle < 1

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return cast("AgentEffect", self._act())


def fails(error: BaseException) -> Callable[[], object]:
    def act() -> object:
        raise error

    return act


def engine_with(store: RunStore | None, *suggestors: object, **options: object) -> Engine:
    engine = Engine(store=store, **cast("dict[str, Any]", options))
    for suggestor in suggestors:
        engine.register_suggestor(cast("Any", suggestor))
    return engine


# --- E: text that cannot be stored ---------------------------------------------------------------


class Tokens(Exception):
    """A failure that says what it spent, and what it wants recorded."""

    def __init__(self, message: str, metadata: object, tokens: object = 3) -> None:
        super().__init__(message)
        self.metadata = metadata
        self.tokens = tokens


async def test_an_exception_holding_a_lone_surrogate_is_saved_escaped_and_said_so(
    store: RunStore,
) -> None:
    error = Tokens(f"model said {SURROGATE}!", {f"k{SURROGATE}": f"v{SURROGATE}\x00"})
    engine = engine_with(store, Once("model", fails(error)))
    result = await engine.run()
    loaded = await read_back(store, result)
    [execution] = loaded.trace.cycles[0].executions
    assert execution.error == "Tokens: model said \\ud800! [1 unstorable character escaped]"
    assert execution.traceback is not None
    assert "Tokens: model said \\ud800!\n" in execution.traceback
    assert execution.traceback.endswith(" [1 unstorable character escaped]")
    assert execution.metadata == {
        "k\\ud800 [1 unstorable character escaped]": (
            "v\\ud800\\x00 [2 unstorable characters escaped]"
        )
    }
    assert execution.tokens == 3


class Sneaky(str):
    """Text whose formatting would run code of its own."""

    def __format__(self, spec: str) -> str:
        raise RuntimeError("formatted")


class Said(Exception):
    def __str__(self) -> str:
        return Sneaky(f"{SURROGATE}\x00" * 2)


async def test_an_exception_whose_message_cannot_be_stored_or_formatted_is_saved(
    store: RunStore,
) -> None:
    engine = engine_with(store, Once("odd", fails(Said())))
    loaded = await read_back(store, await engine.run())
    [execution] = loaded.trace.cycles[0].executions
    assert execution.error == "Said: \\ud800\\x00\\ud800\\x00 [4 unstorable characters escaped]"


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class Lying(Exception):
    @property
    def tokens(self) -> int:
        return 1 // 0

    @property
    def metadata(self) -> object:
        nothing: list[object] = []
        return nothing[1]


async def test_an_exception_that_cannot_say_what_it_is_is_a_recorded_failure(
    store: RunStore,
) -> None:
    engine = engine_with(store, Once("mute", fails(Unprintable())), Once("liar", fails(Lying())))
    result = await engine.run()
    loaded = await read_back(store, result)
    mute, liar = loaded.trace.cycles[0].executions
    assert mute.outcome == liar.outcome == "failed"
    assert mute.error == "Unprintable (its str() raised RuntimeError)"
    assert (liar.error, liar.tokens, liar.metadata) == ("Lying", 0, None)


@pytest.mark.parametrize("name", [f"bad{SURROGATE}", "nul\x00"])
def test_a_suggestor_name_that_cannot_be_stored_is_refused_at_registration(name: str) -> None:
    engine = Engine()
    with pytest.raises(ConfigurationError, match=r"^suggestor name .* holds .*U\+") as caught:
        engine.register_suggestor(cast("Any", Once(name, AgentEffect.empty)))
    assert "\n" not in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself can be printed and stored
    with pytest.raises(ConfigurationError, match=r"^pack id .* holds .*U\+"):
        engine.register_suggestor_in_pack(name, cast("Any", Once("fine", AgentEffect.empty)))
    assert engine.suggestor_names == ()


class Checks:
    """An invariant that says what it was given, in every class."""

    def __init__(self, name: str, reason: str, kind: InvariantClass) -> None:
        self.name = name
        self._reason = reason
        self.invariant_class = kind

    def check(self, ctx: Context, /) -> InvariantResult:
        return InvariantResult.violated(self._reason)


def test_an_invariant_name_that_cannot_be_stored_is_refused_at_registration() -> None:
    engine = Engine()
    invariant = cast("Invariant", Checks(f"i{SURROGATE}", "r", InvariantClass.SEMANTIC))
    with pytest.raises(ConfigurationError, match=r"^invariant name 'i\\ud800' holds a lone"):
        engine.register_invariant(invariant)


@pytest.mark.parametrize("kind", list(InvariantClass))
async def test_an_invariant_reason_that_cannot_be_stored_is_saved_escaped(
    store: RunStore, kind: InvariantClass
) -> None:
    engine = engine_with(store)
    engine.register_invariant(cast("Invariant", Checks("inv", f"x{SURROGATE}\x00y", kind)))
    seed = ProposedFact(key=H, id="a", content="a claim", provenance="me")
    result = await engine.run(inputs=[seed])
    loaded = await read_back(store, result)
    reasons = {v.reason for v in (*loaded.trace.input_violations, *_violations(loaded))}
    assert reasons == {"x\\ud800\\x00y [2 unstorable characters escaped]"}
    assert "\x00" not in loaded.detail


def _violations(record: RunRecord) -> Iterator[Any]:
    for cycle in record.trace.cycles:
        yield from cycle.violations


async def test_metadata_and_refusal_reasons_that_cannot_be_stored_are_saved_escaped(
    store: RunStore,
) -> None:
    item = ProposedFact(key=H, id="x", content="an item", provenance="model")

    def act() -> AgentEffect:
        return AgentEffect(
            metadata={"reply": f"half an emoji: {SURROGATE}"},
            refused=(Refusal(proposal=item, reason=f"unreadable {SURROGATE}"),),
        )

    engine = engine_with(store, Once("model", act))
    loaded = await read_back(store, await engine.run())
    [execution] = loaded.trace.cycles[0].executions
    assert execution.metadata == {
        "reply": "half an emoji: \\ud800 [1 unstorable character escaped]"
    }
    [rejection] = loaded.rejections
    assert (
        rejection.reason == "refused by model: unreadable \\ud800 [1 unstorable character escaped]"
    )


def test_a_decision_by_a_name_that_cannot_be_stored_is_refused() -> None:
    with pytest.raises(ValueError, match=r"(?s)by.*lone surrogate"):
        GateDecision.approve("gate:1:hypotheses/a", by=f"ana{SURROGATE}")
    decision = GateDecision.reject("gate:1:hypotheses/a", by="ana", reason=f"no{SURROGATE}")
    assert decision.reason == "no\\ud800 [1 unstorable character escaped]"


async def test_a_human_reason_that_cannot_be_stored_is_saved_escaped(store: RunStore) -> None:
    proposal = ProposedFact(key=S, id="s", content="a strategy", provenance="planner")
    engine = engine_with(
        store,
        Once("planner", lambda: AgentEffect.with_proposal(proposal)),
        hitl=HitlPolicy(gated_keys=frozenset({S})),
    )
    paused = await engine.run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    [request] = paused.pending
    decision = GateDecision.reject(request.gate_id, by="ana", reason=f"nope {SURROGATE}\x00")
    result = await engine.resume_run(paused.run_id, [decision])
    loaded = await read_back(store, result)
    [note] = [fact for fact in loaded.facts if fact.key is ContextKey.DIAGNOSTIC]
    assert note.content.endswith("nope \\ud800\\x00 [2 unstorable characters escaped]")


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("name", f"n{SURROGATE}", "name"),
        ("formation", "f\x00.py", "formation"),
    ],
)
def test_an_engine_label_that_cannot_be_stored_is_refused(
    option: str, value: str, field: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field} .* holds"):
        Engine(**cast("dict[str, Any]", {option: value}))


def test_a_run_id_that_cannot_be_stored_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"^run_id .* holds"):
        Engine().run_sync(run_id=f"run{SURROGATE}")


# --- F: an effect built around validation ---------------------------------------------------------


def construct(cls: type[BaseModel], **fields: object) -> Any:  # noqa: ANN401 - any model
    """`BaseModel.model_construct`: no validation at all."""
    build: Any = BaseModel.model_construct.__func__
    return build(cls, **fields)


@pytest.mark.parametrize("record_effects", [False, True])
async def test_an_invalid_proposal_in_an_effect_leaves_only_validated_objects_in_the_record(
    store: RunStore, record_effects: bool
) -> None:
    bad = ProposedFact.model_construct(key=H, id="x", content=5, provenance="p")
    good = ProposedFact(key=H, id="y", content="fine", provenance="p")
    engine = engine_with(
        store,
        Once("sloppy", lambda: AgentEffect(proposals=(bad, good))),
        record_effects=record_effects,
    )
    result = await engine.run()
    loaded = await read_back(store, result)
    [rejection] = loaded.rejections
    assert rejection.reason.startswith("invalid proposal: content: Input should be a valid string")
    assert type(rejection.proposal.content) is str
    [execution] = loaded.trace.cycles[0].executions
    assert execution.proposals == 2
    if record_effects:
        assert execution.effect is not None
        assert [p.id for p in execution.effect.proposals] == ["y"]
        replayed = await engine.replay(loaded.trace)
        assert replayed.integrity == result.integrity
    else:
        assert execution.effect is None


async def test_an_effect_whose_metadata_or_refusals_skipped_validation_is_a_failed_call(
    store: RunStore,
) -> None:
    item = ProposedFact(key=H, id="x", content="an item", provenance="model")
    engine = engine_with(
        store,
        Once(
            "meta", lambda: construct(AgentEffect, proposals=(), tokens=0, refused=(), metadata={1})
        ),
        Once(
            "refusing",
            lambda: construct(AgentEffect, proposals=(), tokens=0, refused=7, metadata=None),
        ),
        Once(
            "reasonless",
            lambda: construct(
                AgentEffect,
                proposals=(),
                tokens=0,
                refused=(construct(Refusal, proposal=item, reason=None),),
                metadata=None,
            ),
        ),
        Once(
            "hugely",
            lambda: construct(
                AgentEffect, proposals=(), tokens=10**5000, refused=(), metadata=None
            ),
        ),
    )
    result = await engine.run()
    loaded = await read_back(store, result)
    errors = {e.suggestor: e.error for e in loaded.trace.cycles[0].executions}
    assert all(e.outcome == "failed" for e in loaded.trace.cycles[0].executions)
    assert "metadata" in (errors["meta"] or "")
    assert "refused" in (errors["refusing"] or "")
    assert "refused[0].reason" in (errors["reasonless"] or "")
    assert "tokens" in (errors["hugely"] or "")


async def test_a_refusal_built_around_validation_is_recorded_as_a_valid_stand_in(
    store: RunStore,
) -> None:
    bad = ProposedFact.model_construct(key=H, id="x", content=5, provenance="p")
    engine = engine_with(
        store,
        Once(
            "model", lambda: AgentEffect(refused=(construct(Refusal, proposal=bad, reason="no"),))
        ),
    )
    loaded = await read_back(store, await engine.run())
    [rejection] = loaded.rejections
    assert rejection.reason == "refused by model: no"
    assert rejection.proposal.id == "x"
    assert type(rejection.proposal.content) is str


# Each field of a proposal holding text no record can keep as UTF-8 JSON (a lone surrogate,
# in a copy that skipped validation), or an id holding a control character: how the gate's
# rejection reads, and the id the rejection keeps.
UNSTORABLE_FIELDS: Final = [
    pytest.param({"id": "\x00"}, "id '\\x00' contains whitespace", "\x00", id="id NUL"),
    pytest.param({"id": "a\x1fb"}, "id 'a\\x1fb' contains whitespace", "a\x1fb", id="id US"),
    pytest.param({"id": "a\x85b"}, "id 'a\\x85b' contains whitespace", "a\x85b", id="id NEL"),
    pytest.param(
        {"id": SURROGATE},
        "cannot be hashed as canonical JSON (ValueError: id holds a lone surrogate",
        "\\ud800 [1 unstorable character escaped]",
        id="id surrogate",
    ),
    pytest.param(
        {"content": f"a{SURROGATE}"},
        "cannot be hashed as canonical JSON (ValueError: content holds a lone surrogate",
        "x",
        id="content surrogate",
    ),
    pytest.param(
        {"provenance": SURROGATE},
        "cannot be hashed as canonical JSON (ValueError: provenance holds a lone surrogate",
        "x",
        id="provenance surrogate",
    ),
    pytest.param(
        {"evidence": ("seeds/a", SURROGATE)},
        "cannot be hashed as canonical JSON (ValueError: evidence[1] holds a lone surrogate",
        "x",
        id="evidence surrogate",
    ),
    pytest.param(
        {"payload": {"note": SURROGATE}},
        "cannot be hashed as canonical JSON (ValueError: payload.note holds a lone surrogate",
        "x",
        id="payload surrogate",
    ),
    pytest.param(
        {"payload": {SURROGATE: 1}},
        "cannot be hashed as canonical JSON (ValueError: payload key",
        "x",
        id="payload key surrogate",
    ),
]


def unstorable(fields: dict[str, object], provenance: str) -> ProposedFact:
    """A proposal under `H` with id `x` and `fields`: validated where it can be, else built
    around validation (as a suggestor or a caller can, with `model_construct`)."""
    given: dict[str, Any] = {"key": H, "id": "x", "content": "c", "provenance": provenance}
    given.update(fields)
    try:
        return ProposedFact(**given)
    except ValueError:
        return ProposedFact.model_construct(**given)


async def cli_reads(store: RunStore, run_id: str) -> None:
    """`converge show` and `converge verify` read the stored run (a SQLite file only)."""
    if not isinstance(store, SqliteRunStore):
        return
    path = str(store.path)
    for command in ("show", "verify"):
        code, out = await anyio.to_thread.run_sync(cli, "--store", path, command, run_id)
        assert code == 0, (command, out)
        assert run_id in out or command == "verify"


@pytest.mark.parametrize(("fields", "reason", "ident"), UNSTORABLE_FIELDS)
@pytest.mark.parametrize("record_effects", [False, True])
async def test_a_suggestors_unstorable_proposal_is_a_rejection_and_the_run_is_saved(
    store: RunStore, fields: dict[str, object], reason: str, ident: str, record_effects: bool
) -> None:
    """The gate rejects it, naming the field; the other suggestor's fact is kept, the run
    is saved and reads back, and a replay of it gives the same root."""
    bad = unstorable(fields, "sloppy")
    good = ProposedFact(key=H, id="y", content="fine", provenance="careful")
    engine = engine_with(
        store,
        Once("sloppy", lambda: AgentEffect.with_proposal(bad)),
        Once("careful", lambda: AgentEffect.with_proposal(good)),
        record_effects=record_effects,
    )
    result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    loaded = await read_back(store, result)
    [rejection] = loaded.rejections
    assert (rejection.suggestor, rejection.proposal.key, rejection.proposal.id) == (
        "sloppy",
        H,
        ident,
    )
    assert rejection.reason.startswith(reason), rejection.reason
    assert "\n" not in rejection.reason
    assert [fact.ref for fact in loaded.restore_context().get(H)] == ["hypotheses/y"]
    if record_effects:
        replayed = await engine.replay(loaded.trace)
        assert replayed.integrity.merkle_root == result.integrity.merkle_root
    await cli_reads(store, result.run_id)


@pytest.mark.parametrize(("fields", "reason", "ident"), UNSTORABLE_FIELDS)
async def test_an_unstorable_input_is_a_rejection_and_the_run_is_saved(
    store: RunStore, fields: dict[str, object], reason: str, ident: str
) -> None:
    """An input built around validation no longer stops the first save: the input gate
    rejects it, naming the field, and the record keeps the inputs that can be stored."""
    bad = unstorable(fields, "input:crm")
    good = ProposedFact(key=H, id="y", content="fine", provenance="input:crm")
    engine = engine_with(store)
    result = await engine.run(inputs=[bad, good])
    assert result.stop_reason is StopReason.CONVERGED
    loaded = await read_back(store, result)
    [rejection] = loaded.rejections
    assert (rejection.suggestor, rejection.proposal.key, rejection.proposal.id) == (
        "input",
        H,
        ident,
    )
    assert rejection.reason.startswith(reason), rejection.reason
    assert [fact.ref for fact in loaded.restore_context().get(H)] == ["hypotheses/y"]
    kept = [p.id for p in loaded.trace.inputs]
    assert "y" in kept
    replayed = await engine.replay(loaded.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root
    await cli_reads(store, result.run_id)


@pytest.mark.parametrize(
    "payload",
    [10**5000, {"deep": json.loads("[" * 200 + "]" * 200)}],
    ids=["huge int", "deep nesting"],
)
def test_a_payload_that_could_not_be_read_back_is_refused(payload: JsonValue) -> None:
    with pytest.raises(ValueError, match="payload"):
        ProposedFact(key=H, id="x", content="c", provenance="p", payload=payload)


# --- G: an oversized field is kept once, truncated ------------------------------------------------


@pytest.mark.parametrize("record_effects", [False, True])
def test_an_oversized_content_is_refused_and_stored_once_truncated(
    tmp_path: Path, record_effects: bool
) -> None:
    size = 50 * 1024 * 1024
    path = tmp_path / "runs.db"

    def act() -> AgentEffect:
        content = "a" * size
        return AgentEffect.with_proposal(
            ProposedFact(key=H, id="x", content=content, provenance="p")
        )

    gc.collect()
    tracemalloc.start()
    try:
        engine = engine_with(
            SqliteRunStore(str(path)), Once("big", act), record_effects=record_effects
        )
        result = engine.run_sync()
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    [rejection] = result.rejections
    assert rejection.reason == f"content is {size} bytes, over the limit of {1024 * 1024}"
    content = rejection.proposal.content
    assert content.endswith(f"… [{size} characters, truncated]")
    assert len(content) < 2048
    assert kept < 4 * 1024 * 1024  # nothing of the 50 MB is kept once the run is over
    assert peak < size * 1.5  # the suggestor's own string, and not much more
    with closing(sqlite3.connect(path)) as connection, connection:
        stored = sum(
            len(text or "") for (text,) in connection.execute("SELECT record FROM converge_runs")
        )
    assert stored < 64 * 1024
    loaded = anyio.run(SqliteRunStore(str(path)).load, result.run_id)
    assert loaded.rejections == result.rejections


# --- the property: whatever suggestors hand the engine, the record reads back ---------------------

PIECES = (
    SURROGATE,
    json.loads('"\\udfff"'),
    json.loads('"\\ud83d"'),
    "\x00",
    "\u202e",
    "\u200b",
    "\ufeff",
    "\x1b[31m",
    "\n",
    "'\"\\",
    "😀",
    "é",
    " [1 unstorable character escaped]",
)
hostile_text = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), min_size=1, max_size=6
).map("".join)
ODD_ATOMS = (10**5000, -(10**5000), 2**64, math.nan, math.inf, -0.0, 1e308, b"\x00", {1, 2})
odd_value: st.SearchStrategy[object] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        hostile_text,
        st.sampled_from(range(len(ODD_ATOMS))).map(ODD_ATOMS.__getitem__),  # no repr drawn
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)
DEEP: Final = json.loads("[" * 200 + "]" * 200)


class Hostile:
    """Raises or returns, in its one cycle, what it was drawn."""

    dependencies = ()

    def __init__(self, index: int, act: tuple[object, ...]) -> None:
        self.name = f"hostile-{index}"
        self._act = act

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle < 1

    async def execute(self, ctx: Context, /) -> AgentEffect:
        kind, text, value = self._act
        if kind == "raise":
            raise Tokens(cast("str", text), value, tokens=value)
        if kind == "unprintable":
            raise Unprintable()
        if kind == "deep":
            raise ValueError(DEEP)
        item = ProposedFact(key=H, id=self.name, content="an item", provenance="model")
        if kind == "refuse":
            return AgentEffect(refused=(Refusal(proposal=item, reason=cast("str", text)),))
        if kind == "metadata":
            return AgentEffect(metadata=cast("JsonValue", value))
        odd = construct(ProposedFact, key=H, id=text, content=text, provenance=text, payload=value)
        if kind == "proposal":
            return AgentEffect(proposals=(odd, item))
        return construct(  # "constructed": nothing of it validated
            AgentEffect,
            proposals=(odd, item),
            tokens=value,
            refused=(construct(Refusal, proposal=odd, reason=text),),
            metadata={"odd": value},
        )


class Hostility:
    """An invariant whose reason is drawn."""

    invariant_class = InvariantClass.SEMANTIC

    def __init__(self, reason: str) -> None:
        self.name = "hostility"
        self._reason = reason

    def check(self, ctx: Context, /) -> InvariantResult:
        return InvariantResult.violated(self._reason)


KINDS = ("raise", "unprintable", "deep", "refuse", "metadata", "proposal", "constructed")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(  # a bare string payload holding a lone surrogate, on a proposal the gate refuses
    acts=[("proposal", "\x00", json.loads('"\\ud800"'))], reason=None, record_effects=False
)
@given(
    acts=st.lists(
        st.tuples(st.sampled_from(KINDS), hostile_text, odd_value), min_size=1, max_size=3
    ),
    reason=st.none() | hostile_text,
    record_effects=st.booleans(),
)
def test_whatever_suggestors_hand_the_engine_the_record_reads_back(
    store: RunStore,
    acts: list[tuple[str, str, object]],
    reason: str | None,
    record_effects: bool,
) -> None:
    engine = engine_with(
        store,
        *(Hostile(index, act) for index, act in enumerate(acts)),
        record_effects=record_effects,
    )
    if reason is not None:
        engine.register_invariant(Hostility(reason))
    result = engine.run_sync()
    loaded = anyio.run(read_back, store, result)
    assert loaded.stop_reason is result.stop_reason
    assert len(loaded.trace.cycles[0].executions) == len(acts)
    if record_effects:
        again = anyio.run(engine.replay, loaded.trace)
        assert again.integrity.merkle_root == loaded.integrity.merkle_root
