"""`CancelWatch`, and the lone call a cycle awaits directly under it.

A cycle with one eligible suggestor and no time limit awaits its `execute` with nothing of
the executor's around it; the run's watch is what still tells a cancellation of the run
(raised again) from one the suggestor raised on its own (its failure).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from converge import AgentEffect, Context, ContextKey, ContextSnapshot, Engine, StopReason
from converge._kernel._calls import Slot
from converge._kernel._executor import Executor
from converge._kernel._registry import Registration
from converge._kernel._watch import CancelWatch
from tests.doubles import fact

H = ContextKey.HYPOTHESES


async def suspends(times: int, value: int) -> int:
    for _ in range(times):
        await anyio.lowlevel.checkpoint()
    return value


@pytest.mark.parametrize("times", [0, 1, 3])
async def test_a_watched_coroutine_returns_what_it_returns_however_often_it_suspends(
    times: int,
) -> None:
    watch = CancelWatch()
    assert await watch.watching(suspends(times, 7)) == 7
    assert watch.native == 0


@pytest.mark.parametrize("times", [0, 2])
async def test_a_watched_coroutine_raises_what_it_raises(times: int) -> None:
    async def fails() -> None:
        await suspends(times, 0)
        raise LookupError("gone")

    watch = CancelWatch()
    with pytest.raises(LookupError, match="gone"):
        await watch.watching(fails())
    assert watch.native == 0


async def test_a_cancel_scopes_cancellation_goes_through_and_is_not_counted_as_native() -> None:
    watch = CancelWatch()
    with anyio.fail_after(5), anyio.move_on_after(0.01) as scope:
        await watch.watching(anyio.sleep(30))
    assert scope.cancelled_caught
    assert watch.native == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_native_task_cancel_is_counted_and_goes_through() -> None:
    watch = CancelWatch()
    cleaned: list[bool] = []

    async def sleeps() -> None:
        try:
            await anyio.sleep(30)
        finally:
            cleaned.append(True)

    task = asyncio.ensure_future(watch.watching(sleeps()))
    await anyio.sleep(0.01)
    task.cancel()
    with anyio.fail_after(5), pytest.raises(asyncio.CancelledError):
        await task
    assert watch.native == 1
    assert cleaned == [True]  # thrown into the coroutine, which ran its cleanup


class Lone:
    """One suggestor, alone in its cycles: `behaviour` is its `execute`."""

    name = "lone"
    dependencies = ()

    def __init__(self, behaviour: Callable[[], Awaitable[object]]) -> None:
        self.behaviour = behaviour
        self.calls = 0

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(H, "lone") is None and self.calls == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.calls += 1
        return await self.behaviour()  # pyright: ignore[reportReturnType]


def proposes(times: int, tokens: int = 0) -> Callable[[], Awaitable[object]]:
    async def behaviour() -> object:
        await suspends(times, 0)
        return AgentEffect.with_proposal(fact(H, "lone"), tokens=tokens)

    return behaviour


@pytest.mark.parametrize("times", [0, 2])
@pytest.mark.parametrize("record", [False, True])
async def test_a_lone_call_is_merged_and_recorded_whether_it_suspends_or_not(
    times: int, record: bool
) -> None:
    engine = Engine(record_effects=record)
    engine.register_suggestor(Lone(proposes(times, tokens=5)))
    result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.context.find(H, "lone") is not None
    assert result.tokens == 5
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.proposals, execution.tokens) == ("ok", 1, 5)
    assert execution.duration_ms >= 0
    assert (execution.effect is not None) == record


@pytest.mark.parametrize("times", [0, 2])
async def test_a_lone_failure_is_isolated_or_raised_as_the_engine_says(times: int) -> None:
    async def fails() -> object:
        await suspends(times, 0)
        raise LookupError("no such record")

    engine = Engine()
    engine.register_suggestor(Lone(fails))
    result = await engine.run()
    assert result.stop_reason is StopReason.CONVERGED
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.error) == ("failed", "LookupError: no such record")
    raising = Engine(on_suggestor_error="raise")
    raising.register_suggestor(Lone(fails))
    with pytest.raises(LookupError, match="no such record"):
        await raising.run()


async def test_a_lone_call_that_returns_no_effect_is_named_and_raised_in_raise_mode() -> None:
    async def wrong() -> object:
        return "an effect, honestly"

    raising = Engine(on_suggestor_error="raise")
    raising.register_suggestor(Lone(wrong))
    with pytest.raises(TypeError, match=r"execute\(\) of 'lone' returned str, expected"):
        await raising.run()


async def test_a_lone_call_is_the_executors_and_allocates_no_slot_when_it_succeeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    alone: list[str] = []

    init = Slot.__init__

    def counted_slot(self: Slot, reg: Registration) -> None:
        made.append(reg.name)
        init(self, reg)

    real = Executor.alone

    async def counted(self: Executor, reg: Registration, snapshot: ContextSnapshot) -> object:
        alone.append(reg.name)
        return await real(self, reg, snapshot)

    monkeypatch.setattr(Slot, "__init__", counted_slot)
    monkeypatch.setattr(Executor, "alone", counted)
    engine = Engine()
    engine.register_suggestor(Lone(proposes(1)))
    result = await engine.run()
    assert result.context.find(H, "lone") is not None
    assert alone == ["lone"]  # the one path that calls a suggestor
    assert made == []  # a successful lone call: no slot

    async def fails() -> object:
        raise LookupError("no such record")

    failing = Engine()
    failing.register_suggestor(Lone(fails))
    await failing.run()
    assert made == ["lone"]  # a failure has its slot
