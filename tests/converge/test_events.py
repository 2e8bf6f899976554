"""Events: fired only for what happened, delivered in order to observers and to `stream`."""

from contextlib import aclosing

import anyio
import anyio.lowlevel
import pytest
from hitl_formation import build_engine

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    ConvergeResult,
    CycleFinished,
    Engine,
    EngineEvent,
    FactPromoted,
    GateDecision,
    Observer,
    ProposedFact,
    RunFinished,
    event_adapter,
    suggestor,
)
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

GATE = "gate:2:strategies/costly"


class Recorder:
    def __init__(self) -> None:
        self.events: list[EngineEvent] = []

    def on_event(self, event: EngineEvent, /) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]


def hello(*observers: Observer) -> Engine:
    engine = Engine(observers=observers)
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    engine.register_suggestor(ReactOnceSuggestor("h1", "world"))
    return engine


async def test_events_of_a_scripted_run_come_in_order() -> None:
    recorder = Recorder()
    result = await hello(recorder).run()
    assert recorder.types == [
        "run_started",
        "cycle_started",
        "suggestor_finished",
        "fact_promoted",
        "cycle_finished",
        "cycle_started",
        "suggestor_finished",
        "fact_promoted",
        "cycle_finished",
        "cycle_started",
        "cycle_finished",
        "run_finished",
    ]
    assert {event.run_id for event in recorder.events} == {result.run_id}
    finished = recorder.events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.merkle_root == result.integrity.merkle_root


async def test_an_idempotent_reproposal_is_not_a_promotion() -> None:
    @suggestor(name="again")
    async def again(ctx: Context) -> list[ProposedFact]:
        return [ProposedFact(key=ContextKey.SEEDS, id="x", content="same", provenance="a")]

    recorder = Recorder()
    engine = Engine(observers=[recorder])
    engine.register_suggestor(again)
    await engine.run()
    assert recorder.types.count("fact_promoted") == 1
    assert recorder.types.count("suggestor_finished") == 2


async def test_rejections_failures_and_violations_are_events() -> None:
    class Bad:
        name = "bad"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposal(
                ProposedFact(key=ContextKey.SEEDS, id="no spaces", content="c", provenance="b")
            )

    class Broken(Bad):
        name = "broken"

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise RuntimeError("boom")

    recorder = Recorder()
    engine = Engine(observers=[recorder])
    engine.register_suggestor(Bad())
    engine.register_suggestor(Broken())
    await engine.run()
    rejected = [e for e in recorder.events if e.type == "proposal_rejected"]
    failed = [e for e in recorder.events if e.type == "suggestor_failed"]
    assert [e.reason for e in rejected] == [
        "id 'no spaces' contains whitespace or control characters"
    ]
    assert [e.error for e in failed] == ["RuntimeError: boom"]


async def test_gate_requested_and_decided_events_span_the_pause() -> None:
    recorder = Recorder()
    engine = build_engine(observers=[recorder])
    paused = await engine.run()
    assert paused.checkpoint is not None
    [requested] = [e for e in recorder.events if e.type == "gate_requested"]
    assert (requested.gate_id, requested.ref) == (GATE, "strategies/costly")
    assert recorder.types[-1] == "run_finished"
    recorder.events.clear()
    await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    decided = [e for e in recorder.events if e.type == "gate_decided"]
    assert [(e.gate_id, e.approved, e.by) for e in decided] == [(GATE, True, "jane")]
    promoted = [e for e in recorder.events if isinstance(e, FactPromoted)]
    assert promoted[0].ref == "strategies/costly"
    assert promoted[0].gate == "human"


async def test_an_observer_that_raises_never_breaks_the_run() -> None:
    class Raises:
        def on_event(self, event: EngineEvent, /) -> None:
            raise ValueError("observer bug")

    recorder = Recorder()
    result = await hello(Raises(), recorder).run()
    assert result.converged
    assert recorder.types[-1] == "run_finished"


async def test_async_observers_are_awaited() -> None:
    seen: list[str] = []

    class Slow:
        async def on_event(self, event: EngineEvent, /) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(event.type)

    await hello(Slow()).run()
    assert seen[0] == "run_started"
    assert seen[-1] == "run_finished"


def test_an_observer_without_on_event_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"observers\[0\] \(object\) has no on_event"):
        Engine(observers=[object()])  # pyright: ignore[reportArgumentType]


class Chosen(Recorder):
    """A recorder of the event types it names."""

    def __init__(self, *types: str) -> None:
        super().__init__()
        self.event_types = frozenset(types)


async def test_an_observer_receives_only_the_event_types_it_names() -> None:
    chosen, every = Chosen("cycle_finished", "run_finished"), Recorder()
    await hello(chosen, every).run()
    assert set(chosen.types) == {"cycle_finished", "run_finished"}
    assert chosen.types == [kind for kind in every.types if kind in chosen.event_types]
    assert "fact_promoted" in every.types


async def test_events_nobody_receives_are_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import converge._kernel._run_events as run_events

    built: list[str] = []

    def counting(**fields: object) -> FactPromoted:
        built.append(str(fields["ref"]))
        return FactPromoted.model_validate(fields)

    monkeypatch.setattr(run_events, "FactPromoted", counting)
    chosen = Chosen("cycle_finished")
    await hello(chosen).run()
    assert built == []  # per-fact events: built for an observer that names them only
    finished = [event for event in chosen.events if isinstance(event, CycleFinished)]
    assert [event.by_key for event in finished] == [
        ((ContextKey.SEEDS, 1),),
        ((ContextKey.HYPOTHESES, 1),),
        (),
    ]
    await hello(Chosen("fact_promoted")).run()
    assert built == ["seeds/s1", "hypotheses/h1"]


@pytest.mark.parametrize(
    ("types", "said"),
    [
        (frozenset({"fact_promotd"}), "unknown event type(s) 'fact_promotd'; known: cycle_"),
        ("cycle_finished", "event_types must be a set of event types, not str"),
        (3, "event_types must be a set of event types, not int"),
    ],
)
def test_an_observer_naming_no_real_event_type_is_refused(types: object, said: str) -> None:
    chosen = Chosen()
    chosen.event_types = types  # type: ignore[assignment]
    with pytest.raises(ConfigurationError, match=r"observers\[1\] \(Chosen\): ") as raised:
        Engine(observers=[Recorder(), chosen])
    assert said in str(raised.value)


async def test_events_round_trip_through_json() -> None:
    recorder = Recorder()
    await hello(recorder).run()
    for event in recorder.events:
        assert event_adapter.validate_json(event_adapter.dump_json(event)) == event


async def test_stream_yields_the_events_then_the_result() -> None:
    recorder = Recorder()
    engine = hello(recorder)
    items: list[EngineEvent | ConvergeResult] = []
    async with aclosing(engine.stream()) as stream:
        async for item in stream:
            items.append(item)
    result = items[-1]
    assert isinstance(result, ConvergeResult)
    assert result.converged
    streamed = [item for item in items[:-1] if not isinstance(item, ConvergeResult)]
    assert [e.type for e in streamed] == recorder.types[len(recorder.types) - len(streamed) :]
    assert next(e for e in streamed if isinstance(e, FactPromoted)).ref == "seeds/s1"


async def test_a_slow_stream_consumer_loses_nothing() -> None:
    engine = Engine()
    for index in range(30):
        engine.register_suggestor(SeedSuggestor(f"s{index}", "x"))
    count = 0
    async with aclosing(engine.stream(buffer=1)) as stream:
        async for item in stream:
            await anyio.sleep(0.001)
            if isinstance(item, FactPromoted):
                count += 1
    assert count == 30


async def test_breaking_out_of_a_stream_cancels_the_run() -> None:
    class Forever:
        name = "forever"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            await anyio.sleep(30)
            return AgentEffect.empty()

    engine = Engine()
    engine.register_suggestor(Forever())
    with anyio.fail_after(5):
        async with aclosing(engine.stream()) as stream:
            async for item in stream:
                if not isinstance(item, ConvergeResult) and item.type == "cycle_started":
                    break


async def test_resume_starts_with_run_started() -> None:
    recorder = Recorder()
    engine = build_engine(observers=[recorder])
    paused = await engine.run()
    assert paused.checkpoint is not None
    recorder.events.clear()
    await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    assert recorder.types[0] == "run_started"
    assert recorder.events[0].cycle == 2
    assert recorder.types[1] == "gate_decided"


async def test_replay_emits_cycle_events() -> None:
    recorder = Recorder()
    engine = Engine(observers=[recorder], record_effects=True)
    engine.register_suggestor(SeedSuggestor("s1", "hello"))
    original = await engine.run()
    first = list(recorder.types)
    recorder.events.clear()
    await engine.replay(original.trace)
    assert recorder.types == first


async def test_stream_raises_run_errors_unwrapped() -> None:
    class Broken:
        name = "broken"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return True

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise RuntimeError("boom")

    async def drain(engine: Engine) -> None:
        async with aclosing(engine.stream()) as stream:
            async for _ in stream:
                pass

    engine = Engine(on_suggestor_error="raise")
    engine.register_suggestor(Broken())
    with pytest.raises(RuntimeError, match="boom"):
        await drain(engine)
