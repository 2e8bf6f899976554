"""`Executor`, `Slot` and `failure` directly: order, concurrency, timeouts, error modes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import cast

import anyio
import anyio.lowlevel
import pytest

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ContextSnapshot,
    PromotionPolicy,
    Suggestor,
    SuggestorId,
)
from converge._core._error import describe_error
from converge._kernel._calls import Recorder, Slot, failure
from converge._kernel._effect_check import checked_effect
from converge._kernel._executor import ErrorMode, Executor
from converge._kernel._registry import Registration
from tests.doubles import captured_cancellation, fact

H = ContextKey.HYPOTHESES
Behaviour = Callable[[Context], Awaitable[object]]


class Scripted:
    """A suggestor whose `execute` is `behaviour`; it records the snapshots it was shown."""

    def __init__(self, name: str, behaviour: Behaviour) -> None:
        self.name = name
        self.dependencies: tuple[ContextKey, ...] = ()
        self.behaviour = behaviour
        self.seen: list[Context] = []

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.seen.append(ctx)
        # Some behaviours return something else on purpose: the executor must catch it.
        return cast(AgentEffect, await self.behaviour(ctx))


def proposing(ident: str, *, delay: float = 0.0) -> Behaviour:
    """Sleeps `delay` seconds, then proposes `hypotheses/<ident>`."""

    async def behaviour(ctx: Context) -> object:
        await anyio.sleep(delay)
        return AgentEffect.with_proposal(fact(H, ident))

    return behaviour


def raising(error: BaseException, *, delay: float = 0.0) -> Behaviour:
    async def behaviour(ctx: Context) -> object:
        await anyio.sleep(delay)
        raise error

    return behaviour


def returning(value: object) -> Behaviour:
    async def behaviour(ctx: Context) -> object:
        return value

    return behaviour


def slots_for(*suggestors: Scripted) -> list[Slot]:
    """One slot per suggestor, registered in the order given (ids 0, 1, 2, ...)."""
    return [
        Slot(Registration(SuggestorId(index), suggestor, suggestor.name, (), None, None))
        for index, suggestor in enumerate(suggestors)
    ]


def executor(
    *,
    max_concurrency: int | None = None,
    timeout: float | None = None,
    mode: ErrorMode = "isolate",
    record_effects: bool = False,
) -> Executor:
    return Executor(
        max_concurrency=max_concurrency,
        timeout=timeout,
        mode=mode,
        record_effects=Recorder(PromotionPolicy()) if record_effects else None,
    )


def outcomes(slots: Sequence[Slot]) -> list[str | None]:
    return [None if slot.execution is None else slot.execution.outcome for slot in slots]


# --- order and the snapshot -------------------------------------------------------------------


async def test_slots_keep_registration_order_whatever_the_completion_order() -> None:
    finished: list[str] = []

    def tracked(ident: str, delay: float) -> Behaviour:
        inner = proposing(ident, delay=delay)

        async def behaviour(ctx: Context) -> object:
            effect = await inner(ctx)
            finished.append(ident)
            return effect

        return behaviour

    slots = slots_for(
        Scripted("slow", tracked("slow", 0.06)),
        Scripted("fast", tracked("fast", 0.0)),
        Scripted("mid", tracked("mid", 0.03)),
    )
    await executor().run(slots, ContextSnapshot.empty())

    assert finished == ["fast", "mid", "slow"]
    assert [slot.reg.name for slot in slots] == ["slow", "fast", "mid"]
    for index, slot in enumerate(slots):
        assert slot.effect is not None
        assert [p.id for p in slot.effect.proposals] == [slot.reg.name]
        assert slot.execution is not None
        assert (slot.execution.suggestor, slot.execution.suggestor_id) == (slot.reg.name, index)
        assert slot.error is None


async def test_every_suggestor_sees_the_snapshot_it_was_given() -> None:
    snapshot = ContextSnapshot.empty()
    first = Scripted("first", proposing("a"))
    second = Scripted("second", proposing("b"))
    await executor().run(slots_for(first, second), snapshot)
    assert len(first.seen) == 1
    assert len(second.seen) == 1
    assert first.seen[0] is snapshot
    assert second.seen[0] is snapshot


class Steps:
    """An awaitable that is not a coroutine: it suspends `pauses` times, then ends with
    `outcome` (raised if it is an exception)."""

    def __init__(self, outcome: object, pauses: int) -> None:
        self.outcome = outcome
        self.pauses = pauses

    def __await__(self) -> Generator[object, None, object]:
        for _ in range(self.pauses):
            yield from anyio.lowlevel.checkpoint().__await__()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class Awaiting:
    """A suggestor whose `execute` is a plain method returning a `Steps`, not a coroutine."""

    def __init__(self, name: str, outcome: object, pauses: int) -> None:
        self.name = name
        self.dependencies: tuple[ContextKey, ...] = ()
        self.outcome = outcome
        self.pauses = pauses

    def accepts(self, ctx: Context, /) -> bool:
        return True

    def execute(self, ctx: Context, /) -> Steps:
        return Steps(self.outcome, self.pauses)


def awaiting_slots(count: int, outcome: object, pauses: int) -> list[Slot]:
    return [
        Slot(
            Registration(
                SuggestorId(index),
                cast("Suggestor", Awaiting(f"a-{index}", outcome, pauses)),
                f"a-{index}",
                (),
                None,
                None,
            )
        )
        for index in range(count)
    ]


@pytest.mark.parametrize("count", [1, 2])  # alone in the caller's task, or in a task group
@pytest.mark.parametrize("pauses", [0, 2])
@pytest.mark.parametrize("limit", [None, 5.0])
async def test_an_awaitable_that_is_not_a_coroutine_is_awaited_like_one(
    count: int, pauses: int, limit: float | None
) -> None:
    effect = AgentEffect.with_proposal(fact(H, "x"))
    slots = awaiting_slots(count, effect, pauses)
    await executor(timeout=limit).run(slots, ContextSnapshot.empty())
    assert [slot.effect for slot in slots] == [effect] * count
    assert outcomes(slots) == ["ok"] * count

    stray = awaiting_slots(count, await captured_cancellation(), pauses)
    await executor(timeout=limit).run(stray, ContextSnapshot.empty())
    assert outcomes(stray) == ["failed"] * count  # nothing was cancelling it
    assert all(slot.effect is None for slot in stray)


async def test_no_slots_is_a_no_op_in_both_modes() -> None:
    await executor().run([], ContextSnapshot.empty())
    await executor(mode="raise", max_concurrency=1).run([], ContextSnapshot.empty())


async def test_an_ok_execution_counts_proposals_and_tokens() -> None:
    two = AgentEffect.with_proposals([fact(H, "a"), fact(H, "b")], tokens=11)
    [slot] = slots_for(Scripted("two", returning(two)))
    await executor().run([slot], ContextSnapshot.empty())
    assert slot.effect == two
    assert slot.execution is not None
    execution = slot.execution
    assert (execution.outcome, execution.proposals, execution.tokens) == ("ok", 2, 11)
    assert (execution.error, execution.traceback, execution.phase) == (None, None, "execute")
    assert execution.duration_ms >= 0.0


# --- concurrency ------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "expected_peak"), [(None, 5), (1, 1), (2, 2), (10, 5)])
async def test_max_concurrency_bounds_how_many_run_at_once(
    limit: int | None, expected_peak: int
) -> None:
    running = 0
    peak = 0

    async def behaviour(ctx: Context) -> object:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return AgentEffect.empty()

    slots = slots_for(*(Scripted(f"s{index}", behaviour) for index in range(5)))
    with anyio.fail_after(5):
        await executor(max_concurrency=limit).run(slots, ContextSnapshot.empty())
    assert peak == expected_peak
    assert outcomes(slots) == ["ok"] * 5


# --- timeouts ---------------------------------------------------------------------------------


async def test_a_call_over_the_timeout_is_recorded_as_timed_out() -> None:
    slots = slots_for(
        Scripted("hangs", proposing("never", delay=30)),
        Scripted("quick", proposing("quick")),
    )
    with anyio.fail_after(5):
        await executor(timeout=0.05).run(slots, ContextSnapshot.empty())

    hangs, quick = slots
    assert hangs.effect is None
    assert isinstance(hangs.error, TimeoutError)
    assert hangs.execution is not None
    assert hangs.execution.outcome == "timed_out"
    assert hangs.execution.error == "TimeoutError: no effect within 0.05 s"
    assert hangs.execution.proposals == 0
    assert hangs.execution.effect is None
    assert hangs.execution.duration_ms >= 40.0
    assert quick.error is None
    assert outcomes(slots) == ["timed_out", "ok"]


async def test_a_call_within_the_timeout_is_ok() -> None:
    [slot] = slots_for(Scripted("in-time", proposing("a", delay=0.01)))
    await executor(timeout=5).run([slot], ContextSnapshot.empty())
    assert outcomes([slot]) == ["ok"]
    assert slot.effect is not None


async def test_a_timeout_in_raise_mode_raises_the_timeout_error() -> None:
    slots = slots_for(Scripted("hangs", proposing("never", delay=30)))
    with anyio.fail_after(5), pytest.raises(TimeoutError, match=r"^no effect within 0\.05 s$"):
        await executor(timeout=0.05, mode="raise").run(slots, ContextSnapshot.empty())
    assert outcomes(slots) == ["timed_out"]


async def test_a_call_cancelled_from_outside_keeps_no_execution() -> None:
    slots = slots_for(
        Scripted("hangs", proposing("never", delay=30)),
        Scripted("also-hangs", proposing("never", delay=30)),
    )
    with anyio.fail_after(5), anyio.move_on_after(0.05) as scope:
        await executor(timeout=None).run(slots, ContextSnapshot.empty())
    assert scope.cancelled_caught
    assert outcomes(slots) == [None, None]
    assert [slot.error for slot in slots] == [None, None]
    assert [slot.effect for slot in slots] == [None, None]


# --- failures: isolate and raise --------------------------------------------------------------


async def test_isolate_mode_records_a_failure_and_lets_the_others_finish() -> None:
    boom = RuntimeError("boom")
    slots = slots_for(
        Scripted("before", proposing("a", delay=0.02)),
        Scripted("broken", raising(boom)),
        Scripted("after", proposing("b", delay=0.02)),
    )
    await executor(mode="isolate").run(slots, ContextSnapshot.empty())

    before, broken, after = slots
    assert outcomes(slots) == ["ok", "failed", "ok"]
    assert broken.error is boom
    assert broken.effect is None
    assert broken.execution is not None
    assert broken.execution.error == "RuntimeError: boom"
    assert broken.execution.phase == "execute"
    assert broken.execution.traceback is not None
    assert broken.execution.traceback.startswith("Traceback (most recent call last):")
    assert broken.execution.traceback.rstrip().endswith("RuntimeError: boom")
    assert (before.error, after.error) == (None, None)
    assert before.effect is not None
    assert after.effect is not None


async def test_raise_mode_fills_every_slot_then_raises_the_failure() -> None:
    slots = slots_for(
        Scripted("broken", raising(RuntimeError("boom"))),
        Scripted("fine", proposing("a", delay=0.02)),
    )
    with pytest.raises(RuntimeError, match=r"^boom$"):
        await executor(mode="raise").run(slots, ContextSnapshot.empty())
    assert outcomes(slots) == ["failed", "ok"]
    assert slots[1].effect is not None


async def test_raise_mode_raises_the_first_failure_in_registration_order() -> None:
    first = ValueError("registered first, fails last")
    slots = slots_for(
        Scripted("late", raising(first, delay=0.05)),
        Scripted("early", raising(KeyError("fails first"))),
    )
    with pytest.raises(ValueError, match="registered first") as caught:
        await executor(mode="raise").run(slots, ContextSnapshot.empty())
    assert caught.value is first
    assert outcomes(slots) == ["failed", "failed"]


async def test_raise_mode_with_no_failure_raises_nothing() -> None:
    slots = slots_for(Scripted("a", proposing("a")), Scripted("b", proposing("b")))
    await executor(mode="raise").run(slots, ContextSnapshot.empty())
    assert outcomes(slots) == ["ok", "ok"]


async def test_tokens_reported_by_a_failure_are_kept() -> None:
    costly = RuntimeError("model said no")
    costly.tokens = 9  # pyright: ignore[reportAttributeAccessIssue]
    [slot] = slots_for(Scripted("costly", raising(costly)))
    await executor().run([slot], ContextSnapshot.empty())
    assert slot.execution is not None
    assert (slot.execution.outcome, slot.execution.tokens) == ("failed", 9)


# --- what execute returns ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [("an effect", "str"), (None, "NoneType"), ([fact(H, "a")], "list")],
)
async def test_a_return_value_that_is_not_an_agent_effect_is_a_failure(
    value: object, kind: str
) -> None:
    [slot] = slots_for(Scripted("liar", returning(value)))
    await executor().run([slot], ContextSnapshot.empty())
    assert slot.effect is None
    assert isinstance(slot.error, TypeError)
    assert slot.execution is not None
    assert slot.execution.outcome == "failed"
    assert slot.execution.error == (
        f"TypeError: execute() of 'liar' returned {kind}, expected AgentEffect"
    )
    again = slots_for(Scripted("liar", returning(value)))
    with pytest.raises(TypeError, match=f"returned {kind}, expected AgentEffect$"):
        await executor(mode="raise").run(again, ContextSnapshot.empty())


@pytest.mark.parametrize("record", [True, False])
async def test_record_effects_keeps_the_effect_in_the_execution(record: bool) -> None:
    effect = AgentEffect.with_proposal(fact(H, "a"), tokens=3)
    [slot] = slots_for(Scripted("recorded", returning(effect)))
    await executor(record_effects=record).run([slot], ContextSnapshot.empty())
    assert slot.effect == effect
    assert slot.execution is not None
    assert slot.execution.effect == (effect if record else None)


async def test_record_effects_never_records_a_failure() -> None:
    [slot] = slots_for(Scripted("broken", raising(RuntimeError("boom"))))
    await executor(record_effects=True).run([slot], ContextSnapshot.empty())
    assert slot.execution is not None
    assert slot.execution.effect is None


# --- failure() and describe_error() -----------------------------------------------------------


def registration(name: str = "s", ident: int = 3) -> Registration:
    suggestor = Scripted(name, returning(AgentEffect.empty()))
    return Registration(SuggestorId(ident), suggestor, name, (), None, None)


def test_failure_of_a_message_has_no_traceback() -> None:
    execution = failure(registration(), "failed", 0.0, "accepts() raised", phase="accepts")
    assert (execution.suggestor, execution.suggestor_id) == ("s", 3)
    assert (execution.outcome, execution.error, execution.traceback) == (
        "failed",
        "accepts() raised",
        None,
    )
    assert execution.phase == "accepts"
    assert (execution.proposals, execution.tokens, execution.effect) == (0, 0, None)


@pytest.mark.parametrize("tokens", [0, -4, "9", 2.5, None])
def test_failure_ignores_tokens_that_are_not_a_positive_int(tokens: object) -> None:
    error = RuntimeError("x")
    error.tokens = tokens  # pyright: ignore[reportAttributeAccessIssue]
    assert failure(registration(), "failed", 0.0, error).tokens == 0


def test_describe_error_omits_an_empty_message() -> None:
    assert describe_error(KeyError("k")) == "KeyError: 'k'"
    assert describe_error(RuntimeError()) == "RuntimeError"
    assert describe_error(TimeoutError("")) == "TimeoutError"


# --- the effect check's fast path -----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("proposals", [], "proposals: list"),
        ("tokens", 3.0, "tokens: float"),
        ("tokens", True, "tokens: bool"),
        ("tokens", -1, "tokens: an int outside"),
        ("tokens", 2**63, "tokens: an int outside"),
        ("tokens_unknown", 1, "tokens_unknown: int"),
        ("refused", [], "refused: list"),
        ("metadata", [1], "metadata"),
        ("proposals", None, "proposals: NoneType"),  # read as missing: `None`
    ],
)
def test_an_effect_with_any_one_field_changed_below_the_api_is_refused(
    field: str, value: object, problem: str
) -> None:
    effect = AgentEffect(tokens=3)  # each its own: a copy would share its fields' dict
    if value is None:
        del vars(effect)[field]
    else:
        vars(effect)[field] = value
    checked = checked_effect(effect, "s")
    assert isinstance(checked, str)
    assert "skipped validation" in checked
    assert problem in checked


def test_an_effect_as_validation_leaves_it_is_passed_on_as_it_is() -> None:
    valid = AgentEffect(tokens=3)
    assert checked_effect(valid, "s") is valid
    unknown = AgentEffect(tokens=3)
    del vars(unknown)["tokens_unknown"]  # missing: the default, in a valid copy
    copied = checked_effect(unknown, "s")
    assert type(copied) is AgentEffect
    assert copied is not unknown
    assert copied.tokens == 3
    assert copied.tokens_unknown is False
