"""Trust: no suggestor or observer slips past the engine's cancellation and time limits.

A cancellation exception that nothing requested is a failure, not a cancellation; a result
that comes back after its time limit (because the suggestor blocked the event loop, or
swallowed its cancellation) is a timeout and is never merged; observers cannot hold a run past
its time budget. A genuine cancellation of the caller still propagates.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs
from structlog.typing import EventDict

from converge import (
    AgentEffect,
    Budget,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    EngineEvent,
    Execution,
    StopReason,
    SuggestorBlocked,
)
from tests.doubles import captured_cancellation, fact

H = ContextKey.HYPOTHESES
Behaviour = Callable[[], Awaitable[None]]
Company = Literal["alone", "beside-others"]
COMPANY: tuple[Company, ...] = ("alone", "beside-others")
_Test = TypeVar("_Test", bound=Callable[..., Awaitable[None]])


class Once:
    """Runs in the first cycle only: `behaviour`, then proposes `hypotheses/<name>`."""

    def __init__(self, name: str, behaviour: Behaviour | None = None) -> None:
        self.name = name
        self.dependencies: tuple[ContextKey, ...] = ()
        self.behaviour = behaviour

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.cycle == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        if self.behaviour is not None:
            await self.behaviour()
        return AgentEffect.with_proposal(fact(H, self.name))


class Grows:
    """Proposes one new fact in every cycle, after an optional `anyio.sleep(delay)`."""

    name = "grows"
    dependencies = ()

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        if self.delay:
            await anyio.sleep(self.delay)
        return AgentEffect.with_proposal(fact(H, f"g{ctx.cycle}"))


def raises_stray_cancellation() -> Behaviour:
    async def behaviour() -> None:
        raise await captured_cancellation()

    return behaviour


def blocks(seconds: float) -> Behaviour:
    async def behaviour() -> None:
        time.sleep(seconds)  # noqa: ASYNC251 - the attack: a blocking call on the event loop

    return behaviour


def swallows_cancellation() -> Behaviour:
    async def behaviour() -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            return  # the attack: ignore the cancellation and return an effect anyway

    return behaviour


def turns_cancellation_into_an_error() -> Behaviour:
    async def behaviour() -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("interrupted") from None  # the attack, or a careless wrapper

    return behaviour


def sleeps_then_reraises() -> Behaviour:
    """Catches the cancellation to clean up, then re-raises it: a well-behaved suggestor."""

    async def behaviour() -> None:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            await anyio.lowlevel.cancel_shielded_checkpoint()
            raise

    return behaviour


def engine_with(
    attacker: Once,
    company: Company,
    *,
    suggestor_timeout: float | None = None,
    budget: Budget | None = None,
    on_suggestor_error: Literal["isolate", "raise"] = "isolate",
) -> Engine:
    engine = Engine(
        suggestor_timeout=suggestor_timeout,
        budget=budget or Budget(),
        on_suggestor_error=on_suggestor_error,
    )
    engine.register_suggestor(attacker)
    if company == "beside-others":
        engine.register_suggestor(Once("quick"))
        engine.register_suggestor(Once("also-quick"))
    return engine


def execution_of(result: ConvergeResult, name: str) -> Execution:
    [execution] = [
        execution
        for cycle in result.trace.cycles
        for execution in cycle.executions
        if execution.suggestor == name
    ]
    return execution


def assert_others_merged(result: ConvergeResult, company: Company) -> None:
    if company == "beside-others":
        assert result.context.find(H, "quick") is not None
        assert result.context.find(H, "also-quick") is not None


def logged(logs: Sequence[EventDict], event: str) -> list[EventDict]:
    return [entry for entry in logs if entry["event"] == event]


# --- 1. a cancellation nobody requested is a failure -----------------------------------------


@pytest.mark.parametrize("limit", [None, 5.0])
@pytest.mark.parametrize("company", COMPANY)
async def test_a_stray_cancellation_is_a_failed_execution(
    company: Company, limit: float | None
) -> None:
    engine = engine_with(
        Once("stray", raises_stray_cancellation()), company, suggestor_timeout=limit
    )
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    execution = execution_of(result, "stray")
    assert execution.outcome == "failed"
    assert execution.error is not None
    assert anyio.get_cancelled_exc_class().__name__ in execution.error
    assert "nothing was cancelling" in execution.error
    assert execution.traceback is not None
    assert result.context.find(H, "stray") is None
    assert_others_merged(result, company)


@pytest.mark.parametrize("budget", [None, Budget(max_seconds=30)])
@pytest.mark.parametrize("limit", [None, 5.0])
@pytest.mark.parametrize("company", COMPANY)
async def test_a_suggestors_own_cancel_scopes_still_work(
    company: Company, limit: float | None, budget: Budget | None
) -> None:
    async def behaviour() -> None:
        with anyio.move_on_after(0.01):
            await anyio.sleep(30)  # its own timeout: cancelled, caught by its own scope
        with anyio.CancelScope() as scope:
            scope.cancel()
            await anyio.lowlevel.checkpoint()
        await anyio.sleep(0.01)

    engine = engine_with(Once("scoped", behaviour), company, suggestor_timeout=limit, budget=budget)
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert execution_of(result, "scoped").outcome == "ok"
    assert result.context.find(H, "scoped") is not None
    assert_others_merged(result, company)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("company", COMPANY)
async def test_a_fresh_cancelled_error_raised_by_a_suggestor_is_a_failure(
    company: Company,
) -> None:
    async def behaviour() -> None:
        raise anyio.get_cancelled_exc_class()()

    engine = engine_with(Once("stray", behaviour), company)
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert execution_of(result, "stray").outcome == "failed"
    assert execution_of(result, "stray").error == (
        "CancelledError, raised while nothing was cancelling the call"
    )
    assert_others_merged(result, company)


async def test_a_stray_cancellation_in_raise_mode_raises_a_runtime_error() -> None:
    engine = engine_with(
        Once("stray", raises_stray_cancellation()), "alone", on_suggestor_error="raise"
    )
    with anyio.fail_after(10), pytest.raises(RuntimeError, match="nothing was cancelling"):
        await engine.run()


@pytest.mark.parametrize("limit", [None, 5.0])
@pytest.mark.parametrize("company", COMPANY)
async def test_cancelling_the_caller_still_propagates_through_a_reraising_suggestor(
    company: Company, limit: float | None
) -> None:
    engine = engine_with(
        Once("cleans-up", sleeps_then_reraises()), company, suggestor_timeout=limit
    )
    await assert_a_cancel_scope_cancels(engine)


@pytest.mark.parametrize("company", COMPANY)
async def test_the_time_budget_still_cancels_a_reraising_suggestor(company: Company) -> None:
    engine = engine_with(
        Once("cleans-up", sleeps_then_reraises()), company, budget=Budget(max_seconds=0.2)
    )
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    execution = execution_of(result, "cleans-up")
    assert (execution.outcome, execution.error) == ("timed_out", "cancelled: time budget exhausted")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("limit", [None, 5.0])
@pytest.mark.parametrize("company", COMPANY)
async def test_a_native_asyncio_timeout_around_run_still_cancels_it(
    company: Company, limit: float | None
) -> None:
    import asyncio

    for behaviour in (sleeps_then_reraises(), None):
        attacker = Once("sleeps", behaviour or (lambda: anyio.sleep(30)))
        engine = engine_with(attacker, company, suggestor_timeout=limit)
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.run(), 0.1)
        with anyio.fail_after(10), pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await engine.run()


Attack = Literal["swallows", "turns-into-an-error"]


def catching_engine(attack: Attack, company: Company, limit: float | None) -> Engine:
    """An engine whose suggestor catches the run's cancellation: to return, or to raise."""
    if attack == "swallows":
        behaviour = swallows_cancellation()
    else:
        behaviour = turns_cancellation_into_an_error()
    return engine_with(Once("attacker", behaviour), company, suggestor_timeout=limit)


async def assert_a_cancel_scope_cancels(engine: Engine) -> None:
    """A cancel scope around `engine.run()` cancels it: the run never returns a result."""
    finished = False
    with anyio.fail_after(10), anyio.move_on_after(0.1) as scope:
        await engine.run()
        finished = True
    assert scope.cancelled_caught
    assert not finished


def every_attack(test: _Test) -> _Test:
    """Each way of catching the run's cancellation, with and without a `suggestor_timeout`,
    the attacker alone and beside others."""
    test = pytest.mark.parametrize("company", COMPANY)(test)
    test = pytest.mark.parametrize("limit", [None, 5.0])(test)
    return pytest.mark.parametrize("attack", ["swallows", "turns-into-an-error"])(test)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@every_attack
async def test_a_suggestor_cannot_swallow_a_native_cancellation_of_the_run(
    company: Company, limit: float | None, attack: Attack
) -> None:
    import asyncio

    engine = catching_engine(attack, company, limit)
    with anyio.fail_after(10), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await engine.run()


@every_attack
async def test_a_suggestor_cannot_swallow_a_cancel_scopes_cancellation_of_the_run(
    company: Company, limit: float | None, attack: Attack
) -> None:
    engine = catching_engine(attack, company, limit)
    await assert_a_cancel_scope_cancels(engine)


# --- 2a, 2d. a suggestor that blocks the event loop -------------------------------------------


@pytest.mark.parametrize("company", COMPANY)
async def test_a_result_after_the_suggestor_timeout_is_a_timeout_and_not_merged(
    company: Company,
) -> None:
    engine = engine_with(Once("blocker", blocks(0.4)), company, suggestor_timeout=0.1)
    with capture_logs() as logs:
        result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    execution = execution_of(result, "blocker")
    assert execution.outcome == "timed_out"
    assert execution.error is not None
    assert execution.error.startswith("TimeoutError: no effect within 0.1 s")
    assert execution.proposals == 0
    assert result.context.find(H, "blocker") is None
    assert_others_merged(result, company)
    [warning] = logged(logs, "suggestor_blocked")
    assert warning["log_level"] == "warning"
    assert (warning["suggestor"], warning["cycle"]) == ("blocker", 1)
    assert warning["held_seconds"] > 0.1
    assert warning["run_id"] == result.run_id


async def test_a_blocking_suggestor_is_also_an_event_for_observers() -> None:
    events: list[EngineEvent] = []
    engine = Engine(suggestor_timeout=0.05, observers=[Collect(events)])
    engine.register_suggestor(Once("blocker", blocks(0.3)))
    result = await engine.run()
    [blocked] = [event for event in events if isinstance(event, SuggestorBlocked)]
    assert (blocked.suggestor, blocked.cycle, blocked.run_id) == ("blocker", 1, result.run_id)
    assert blocked.held_seconds > 0.1


class Collect:
    def __init__(self, into: list[EngineEvent]) -> None:
        self._into = into

    def on_event(self, event: EngineEvent, /) -> None:
        self._into.append(event)


async def test_a_late_result_in_raise_mode_raises_the_timeout() -> None:
    engine = engine_with(
        Once("blocker", blocks(0.3)), "alone", suggestor_timeout=0.05, on_suggestor_error="raise"
    )
    with pytest.raises(TimeoutError, match=r"^no effect within 0\.05 s"):
        await engine.run()


@pytest.mark.parametrize("company", COMPANY)
async def test_a_blocking_suggestor_cannot_outlast_the_time_budget(company: Company) -> None:
    engine = engine_with(Once("blocker", blocks(0.5)), company, budget=Budget(max_seconds=0.2))
    with capture_logs() as logs:
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.context.find(H, "blocker") is None
    assert len(result.context) == 0  # a cycle the time budget stopped merges nothing
    assert not result.trace.cycles[0].merged
    execution = execution_of(result, "blocker")
    assert execution.outcome == "timed_out"
    [warning] = logged(logs, "suggestor_blocked")
    assert (warning["suggestor"], warning["cycle"]) == ("blocker", 1)
    assert warning["held_seconds"] > 0.2


async def test_a_suggestor_within_its_limits_is_not_reported_as_blocked() -> None:
    engine = engine_with(
        Once("prompt", lambda: anyio.sleep(0.01)),
        "beside-others",
        suggestor_timeout=5,
        budget=Budget(max_seconds=30),
    )
    with capture_logs() as logs:
        result = await engine.run()
    assert result.converged
    assert execution_of(result, "prompt").outcome == "ok"
    assert result.context.find(H, "prompt") is not None
    assert logged(logs, "suggestor_blocked") == []


# --- 2b. a suggestor that swallows its cancellation -------------------------------------------


@pytest.mark.parametrize("company", COMPANY)
async def test_swallowing_the_timeout_cancellation_is_a_timeout_and_not_merged(
    company: Company,
) -> None:
    engine = engine_with(Once("swallower", swallows_cancellation()), company, suggestor_timeout=0.1)
    with anyio.fail_after(10), capture_logs() as logs:
        result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    execution = execution_of(result, "swallower")
    assert execution.outcome == "timed_out"
    assert execution.error is not None
    assert execution.error.startswith("TimeoutError: no effect within 0.1 s")
    assert result.context.find(H, "swallower") is None
    assert_others_merged(result, company)
    assert logged(logs, "suggestor_blocked") == []


@pytest.mark.parametrize("company", COMPANY)
async def test_swallowing_the_time_budget_cancellation_stops_the_run_unmerged(
    company: Company,
) -> None:
    engine = engine_with(
        Once("swallower", swallows_cancellation()), company, budget=Budget(max_seconds=0.2)
    )
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert len(result.context) == 0
    assert execution_of(result, "swallower").outcome == "timed_out"


# --- 2c. observers run under the run's deadline -----------------------------------------------


class Hangs:
    """An async observer that never returns once it sees an event of type `on`."""

    def __init__(self, on: str) -> None:
        self.on = on

    async def on_event(self, event: EngineEvent, /) -> None:
        if event.type == self.on:
            await anyio.sleep_forever()


class Collects:
    """A well-behaved async observer."""

    def __init__(self) -> None:
        self.types: list[str] = []

    async def on_event(self, event: EngineEvent, /) -> None:
        await anyio.lowlevel.checkpoint()
        self.types.append(event.type)


@pytest.mark.parametrize("on", ["run_started", "cycle_finished"])
async def test_an_observer_that_never_returns_cannot_hold_the_run_past_its_budget(
    on: str,
) -> None:
    collects = Collects()
    engine = Engine(observers=[Hangs(on), collects], budget=Budget(max_seconds=0.3))
    engine.register_suggestor(Grows())
    with anyio.fail_after(10), capture_logs() as logs:
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.detail.startswith("max_seconds (")
    [warning] = logged(logs, "observer_timed_out")
    assert warning["log_level"] == "warning"
    assert (warning["observer"], warning["event_type"]) == ("Hangs", on)
    assert collects.types[-1] == "run_finished"  # the others still hear how the run ended


async def test_a_blocking_sync_observer_stops_the_run_before_the_next_cycle() -> None:
    class Blocks:
        def on_event(self, event: EngineEvent, /) -> None:
            if event.type == "cycle_finished":
                time.sleep(0.4)

    engine = Engine(observers=[Blocks()], budget=Budget(max_seconds=0.2))
    engine.register_suggestor(Grows())
    with anyio.fail_after(10):
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert result.cycles == 1
    assert [fact.id for fact in result.context.facts()] == ["g0"]


async def test_a_time_stopped_run_still_tells_its_async_observers_it_finished() -> None:
    collects = Collects()
    engine = Engine(observers=[collects], budget=Budget(max_seconds=0.2))
    engine.register_suggestor(Once("sleeps", lambda: anyio.sleep(30)))
    with anyio.fail_after(10), capture_logs() as logs:
        result = await engine.run()
    assert result.stop_reason is StopReason.TIME_BUDGET_EXHAUSTED
    assert collects.types[-2:] == ["cycle_finished", "run_finished"]
    assert logged(logs, "observer_timed_out") == []


async def test_observers_of_a_run_without_a_time_budget_are_not_timed() -> None:
    collects = Collects()
    engine = Engine(observers=[collects], budget=Budget(max_cycles=3))
    engine.register_suggestor(Grows(delay=0.01))
    result = await engine.run()
    assert result.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert collects.types[0] == "run_started"
    assert collects.types[-1] == "run_finished"
