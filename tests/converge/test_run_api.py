"""The run you expect: a formation's engine runs with its inputs; `*_sync` refuse a running loop."""

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread
import pytest
from hitl_formation import build_engine

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    Formation,
    GateDecision,
    ProposedFact,
    SqliteRunStore,
    StopReason,
)
from converge_suggestors import ReactOnceSuggestor
from tests.cli_runs import cli

GATE = "gate:2:strategies/costly"


def seed(fact_id: str) -> ProposedFact:
    return ProposedFact(key=ContextKey.SEEDS, id=fact_id, content=fact_id, provenance="test")


def seed_ids(result: ConvergeResult) -> list[str]:
    return [fact.id for fact in result.context.facts() if fact.key is ContextKey.SEEDS]


class Counting:
    """A suggestor that counts its calls and proposes nothing."""

    name = "counting"
    dependencies = ()

    def __init__(self) -> None:
        self.calls = 0

    def accepts(self, ctx: Context, /) -> bool:
        return self.calls == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.calls += 1
        return AgentEffect.empty()


def seeded_formation() -> Formation:
    """Its input `question` wakes a suggestor that notes it as a hypothesis."""
    noted = ReactOnceSuggestor(
        "noted", "The question is noted", source=ContextKey.SEEDS, target=ContextKey.HYPOTHESES
    )
    return Formation(name="seeded", suggestors=(noted,), inputs=(seed("question"),))


def test_formation_engine_run_sync_merges_the_formation_inputs() -> None:
    result = seeded_formation().engine().run_sync()
    assert result.stop_reason is StopReason.CONVERGED
    assert seed_ids(result) == ["question"]
    assert result.context.find(ContextKey.HYPOTHESES, "noted") is not None
    assert [p.content for p in result.trace.inputs] == ["question"]


def test_formation_engine_run_sync_with_inputs_replaces_the_formation_inputs() -> None:
    engine = seeded_formation().engine()
    assert seed_ids(engine.run_sync(inputs=[seed("other")])) == ["other"]
    assert seed_ids(engine.run_sync(inputs=())) == []


def test_formation_engine_override_inputs_replaces_the_formation_inputs() -> None:
    result = seeded_formation().engine(inputs=[seed("override")]).run_sync(backend="trio")
    assert seed_ids(result) == ["override"]


async def test_formation_engine_run_merges_the_formation_inputs() -> None:
    result = await seeded_formation().engine().run()
    assert seed_ids(result) == ["question"]


async def test_formation_engine_stream_merges_the_formation_inputs() -> None:
    items = [item async for item in seeded_formation().engine().stream()]
    result = items[-1]
    assert isinstance(result, ConvergeResult)
    assert seed_ids(result) == ["question"]


async def test_formation_run_merges_its_inputs_and_takes_overrides() -> None:
    formation = seeded_formation()
    assert seed_ids(await formation.run()) == ["question"]
    assert seed_ids(await formation.run(inputs=[seed("other")])) == ["other"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_formation_run_sync_merges_its_inputs_on_either_backend(
    backend: Literal["asyncio", "trio"],
) -> None:
    result = seeded_formation().run_sync(backend=backend)
    assert result.converged
    assert seed_ids(result) == ["question"]
    assert result.context.find(ContextKey.HYPOTHESES, "noted") is not None


def test_formation_run_sync_passes_overrides_to_the_engine() -> None:
    result = seeded_formation().run_sync(inputs=[seed("a"), seed("b")], record_effects=False)
    assert seed_ids(result) == ["a", "b"]
    executions = [e for c in result.trace.cycles for e in c.executions]
    assert executions
    assert all(e.effect is None for e in executions)


def test_engine_not_built_by_a_formation_runs_without_inputs() -> None:
    result = Engine().run_sync()
    assert len(result.context) == 0
    assert result.trace.inputs == ()


def test_engine_inputs_keyword_must_hold_proposed_facts() -> None:
    with pytest.raises(ConfigurationError, match=r"inputs\[1\] must be a ProposedFact, got str"):
        Engine(inputs=[seed("a"), "b"])  # pyright: ignore[reportArgumentType]


def test_run_sync_passes_the_run_id() -> None:
    assert Engine().run_sync(run_id="nightly-1").run_id == "nightly-1"


def test_resume_sync_approves_a_paused_run_and_converges() -> None:
    engine = build_engine()
    paused = engine.run_sync()
    assert paused.checkpoint is not None
    decision = GateDecision.approve(GATE, by="jane")
    result = engine.resume_sync(paused.checkpoint, [decision], backend="trio")
    assert result.converged
    costly = result.context.find(ContextKey.STRATEGIES, "costly")
    assert costly is not None
    assert costly.promotion.approved_by == "jane"


def test_resume_run_sync_continues_a_stored_paused_run(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.db")
    try:
        paused = build_engine(store=store).run_sync()
        assert paused.stop_reason is StopReason.AWAITING_HUMAN
        decisions = [GateDecision.reject(GATE, by="jane", reason="too dear")]
        result = build_engine(store=store).resume_run_sync(paused.run_id, decisions)
        assert result.converged
        assert result.run_id == paused.run_id
        assert result.context.find(ContextKey.STRATEGIES, "costly") is None
    finally:
        store.close()


def sync_calls(engine: Engine) -> dict[str, Callable[[], object]]:
    """Each `*_sync` method, called as a user would; none of them may start."""
    checkpoint = build_engine().run_sync().checkpoint
    assert checkpoint is not None
    return {
        "Engine.run_sync": engine.run_sync,
        "Engine.resume_sync": lambda: engine.resume_sync(checkpoint),
        "Engine.resume_run_sync": lambda: engine.resume_run_sync("some-run"),
        "Formation.run_sync": seeded_formation().run_sync,
    }


CALLS = ["Engine.run_sync", "Engine.resume_sync", "Engine.resume_run_sync", "Formation.run_sync"]


@pytest.mark.parametrize("name", CALLS)
async def test_sync_methods_refuse_a_running_event_loop_and_say_what_to_await(name: str) -> None:
    counting = Counting()
    engine = Engine()
    engine.register_suggestor(counting)
    call = (await anyio.to_thread.run_sync(sync_calls, engine))[name]
    awaited = name.removesuffix("_sync").lower()
    with pytest.raises(ConfigurationError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(f"{name} was called inside a running event loop")
    assert f"Use `await {awaited}(...)` instead" in message
    assert "define the module-level `formation` and let `converge run` run it" in message
    assert counting.calls == 0


async def test_run_sync_works_from_a_worker_thread_of_a_running_loop() -> None:
    """Only the loop's own thread is refused: a worker thread may start a loop of its own."""
    result = await anyio.to_thread.run_sync(seeded_formation().engine().run_sync)
    assert seed_ids(result) == ["question"]


def test_converge_run_of_a_file_that_calls_run_sync_fails_with_the_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "eager.py"
    file.write_text(
        "from converge import Formation\n\n"
        "formation = Formation(name='eager', suggestors=())\n"
        "result = formation.run_sync()\n",
        encoding="utf-8",
    )
    code, out = cli("--store", str(tmp_path / "runs.db"), "run", str(file))
    err = capsys.readouterr().err
    assert code == 1
    assert out == ""
    assert err.startswith(
        "error: ConfigurationError: Formation.run_sync was called inside a running event loop"
    )
    assert "Use `await formation.run(...)` instead" in err
    assert "let `converge run` run it" in err
    assert "Traceback" not in err
