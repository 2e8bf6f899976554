"""Faults: a failing or slow suggestor is isolated and recorded, or re-raised on request."""

import anyio
import pytest

from converge import AgentEffect, Context, ContextKey, Engine, ProposedFact, StopReason

HYPOTHESES = ContextKey.HYPOTHESES


class Faulty:
    """Fails in `accepts` or `execute`, or returns the wrong thing, as configured."""

    def __init__(self, name: str, mode: str) -> None:
        self.name = name
        self.dependencies = ()
        self.mode = mode

    def accepts(self, ctx: Context, /) -> bool:
        if self.mode == "accepts":
            raise ValueError("accepts exploded")
        if self.mode == "accepts-type":
            return "yes"  # pyright: ignore[reportReturnType]
        return ctx.cycle == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        if self.mode == "execute":
            raise RuntimeError("execute exploded")
        if self.mode == "slow":
            await anyio.sleep(30)
        if self.mode == "wrong-type":
            return [ProposedFact(key=HYPOTHESES, id="x", content="c", provenance="p")]  # pyright: ignore[reportReturnType]
        return AgentEffect.empty()


class Good:
    name = "good"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(HYPOTHESES, "good") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(key=HYPOTHESES, id="good", content="fine", provenance="good")
        )


async def run_with(mode: str, **settings: object) -> tuple[Engine, object]:
    engine = Engine(**settings)  # pyright: ignore[reportArgumentType]
    engine.register_suggestor(Faulty("faulty", mode))
    engine.register_suggestor(Good())
    return engine, await engine.run()


async def test_failing_execute_is_recorded_and_others_still_merge() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "execute"))
    engine.register_suggestor(Good())
    result = await engine.run()
    assert result.converged
    assert result.context.find(HYPOTHESES, "good") is not None
    failed, ok = result.trace.cycles[0].executions
    assert (failed.suggestor, failed.outcome, failed.phase) == ("faulty", "failed", "execute")
    assert failed.error == "RuntimeError: execute exploded"
    assert failed.traceback is not None
    assert "execute exploded" in failed.traceback
    assert ok.outcome == "ok"
    assert ok.proposals == 1


async def test_failing_accepts_is_recorded_as_a_failed_execution() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "accepts"))
    engine.register_suggestor(Good())
    result = await engine.run()
    assert result.converged
    first = result.trace.cycles[0]
    assert first.eligible == ("good",)
    failed = first.executions[0]
    assert (failed.outcome, failed.phase, failed.error) == (
        "failed",
        "accepts",
        "ValueError: accepts exploded",
    )


async def test_accepts_returning_a_non_bool_is_a_failure() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "accepts-type"))
    result = await engine.run()
    failed = result.trace.cycles[0].executions[0]
    assert failed.error == "TypeError: accepts() of 'faulty' returned str, expected bool"


async def test_execute_returning_a_non_effect_is_a_failure() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "wrong-type"))
    result = await engine.run()
    assert len(result.context) == 0
    failed = result.trace.cycles[0].executions[0]
    assert failed.outcome == "failed"
    assert failed.error == "TypeError: execute() of 'faulty' returned list, expected AgentEffect"


async def test_slow_execute_times_out_and_is_recorded() -> None:
    engine = Engine(suggestor_timeout=0.05)
    engine.register_suggestor(Faulty("faulty", "slow"))
    engine.register_suggestor(Good())
    with anyio.fail_after(5):
        result = await engine.run()
    assert result.converged
    assert result.context.find(HYPOTHESES, "good") is not None
    timed_out = result.trace.cycles[0].executions[0]
    assert timed_out.outcome == "timed_out"
    assert timed_out.error == "TimeoutError: no effect within 0.05 s"
    assert timed_out.duration_ms >= 40


async def test_a_timeout_error_raised_by_the_suggestor_is_a_failure_not_a_timeout() -> None:
    class RaisesTimeout:
        name = "raises-timeout"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return ctx.cycle == 0

        async def execute(self, ctx: Context, /) -> AgentEffect:
            raise TimeoutError("upstream")

    engine = Engine(suggestor_timeout=5)
    engine.register_suggestor(RaisesTimeout())
    result = await engine.run()
    execution = result.trace.cycles[0].executions[0]
    assert (execution.outcome, execution.error) == ("failed", "TimeoutError: upstream")


async def test_raise_mode_reraises_the_execute_error() -> None:
    engine = Engine(on_suggestor_error="raise")
    engine.register_suggestor(Faulty("faulty", "execute"))
    engine.register_suggestor(Good())
    with pytest.raises(RuntimeError, match="execute exploded"):
        await engine.run()


async def test_raise_mode_reraises_the_accepts_error() -> None:
    engine = Engine(on_suggestor_error="raise")
    engine.register_suggestor(Faulty("faulty", "accepts"))
    with pytest.raises(ValueError, match="accepts exploded"):
        await engine.run()


async def test_raise_mode_reraises_a_timeout() -> None:
    engine = Engine(on_suggestor_error="raise", suggestor_timeout=0.02)
    engine.register_suggestor(Faulty("faulty", "slow"))
    with pytest.raises(TimeoutError):
        await engine.run()


async def test_caller_cancellation_propagates() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "slow"))
    finished = False
    with anyio.move_on_after(0.05) as scope:
        await engine.run()
        finished = True
    assert scope.cancelled_caught
    assert not finished


async def test_caller_cancellation_propagates_through_a_task_group() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("slow-a", "slow"))
    engine.register_suggestor(Faulty("slow-b", "slow"))
    with anyio.move_on_after(0.05) as scope:
        await engine.run()
    assert scope.cancelled_caught


async def test_failures_do_not_change_the_stop_reason() -> None:
    engine = Engine()
    engine.register_suggestor(Faulty("faulty", "execute"))
    result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
