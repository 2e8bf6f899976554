"""Run the eligible suggestors of a cycle concurrently against one snapshot.

Results come back in registration order, never completion order. A failure or timeout is
isolated into an `Execution` record unless the engine is set to re-raise.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Literal, final

import anyio

from ._context import ContextSnapshot
from ._effect import AgentEffect
from ._model import trusted
from ._registry import Registration
from ._trace import Execution, Outcome

__all__ = ["ErrorMode", "Executor", "describe_error", "failure"]

ErrorMode = Literal["isolate", "raise"]


def describe_error(error: BaseException) -> str:
    """`"TypeName: message"`, or the type name alone when the message is empty."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def failure(
    reg: Registration,
    outcome: Outcome,
    started: float,
    error: BaseException | str,
    *,
    phase: Literal["accepts", "execute"] = "execute",
) -> Execution:
    """An `Execution` record for a call that did not produce an effect."""
    tokens = 0
    if isinstance(error, BaseException):
        text = describe_error(error)
        formatted = "".join(traceback.format_exception(error))
        spent = getattr(error, "tokens", 0)
        if isinstance(spent, int) and spent > 0:
            tokens = spent  # a failure may still have cost model tokens
    else:
        text, formatted = error, None
    return trusted(
        Execution,
        {
            "suggestor": reg.name,
            "suggestor_id": int(reg.id),
            "outcome": outcome,
            "duration_ms": (perf_counter() - started) * 1000.0,
            "proposals": 0,
            "tokens": tokens,
            "error": text,
            "phase": phase,
            "traceback": formatted,
            "effect": None,
        },
    )


def _ok(reg: Registration, started: float, effect: AgentEffect, record: bool) -> Execution:
    return trusted(
        Execution,
        {
            "suggestor": reg.name,
            "suggestor_id": int(reg.id),
            "outcome": "ok",
            "duration_ms": (perf_counter() - started) * 1000.0,
            "proposals": len(effect.proposals),
            "tokens": effect.tokens,
            "error": None,
            "phase": "execute",
            "traceback": None,
            "effect": effect if record else None,
        },
    )


@final
@dataclass(slots=True)
class Slot:
    """One eligible suggestor's result; `execution` stays `None` if it was cancelled."""

    reg: Registration
    effect: AgentEffect | None = None
    execution: Execution | None = None
    error: BaseException | None = None


@final
class Executor:
    """Calls `execute` on each eligible suggestor, at most `max_concurrency` at once."""

    __slots__ = ("_limiter", "_mode", "_record", "_timeout")

    def __init__(
        self,
        *,
        max_concurrency: int | None,
        timeout: float | None,
        mode: ErrorMode,
        record_effects: bool = False,
    ) -> None:
        self._record = record_effects
        self._limiter = None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency)
        self._timeout = timeout
        self._mode = mode

    async def run(self, slots: Sequence[Slot], snapshot: ContextSnapshot) -> None:
        """Execute each slot's suggestor against `snapshot`, filling the slots in place.

        Slots stay in registration order; a slot whose call was cancelled keeps no execution.
        """
        if len(slots) == 1:
            await self._run_one(slots[0], snapshot)  # a lone suggestor needs no task group
        elif slots:
            call = self._call if self._limiter is None else self._run_one
            async with anyio.create_task_group() as group:
                for slot in slots:
                    group.start_soon(call, slot, snapshot, name=slot.reg.name)
        if self._mode == "raise":
            for slot in slots:
                if slot.error is not None:
                    raise slot.error

    async def _run_one(self, slot: Slot, snapshot: ContextSnapshot) -> None:
        limiter = self._limiter
        if limiter is None:
            await self._call(slot, snapshot)
        else:
            async with limiter:
                await self._call(slot, snapshot)

    async def _call(self, slot: Slot, snapshot: ContextSnapshot) -> None:
        reg = slot.reg
        started = perf_counter()
        try:
            if self._timeout is None:
                effect = await reg.suggestor.execute(snapshot)
            else:
                effect = None
                with anyio.move_on_after(self._timeout) as scope:
                    effect = await reg.suggestor.execute(snapshot)
                if scope.cancelled_caught:
                    error = TimeoutError(f"no effect within {self._timeout} s")
                    slot.execution = failure(reg, "timed_out", started, error)
                    slot.error = error
                    return
        except Exception as error:  # isolated: recorded, never swallowed silently
            slot.execution = failure(reg, "failed", started, error)
            slot.error = error
            return
        if not isinstance(effect, AgentEffect):
            error = TypeError(
                f"execute() of {reg.name!r} returned {type(effect).__name__}, expected AgentEffect"
            )
            slot.execution = failure(reg, "failed", started, error)
            slot.error = error
            return
        slot.effect = effect
        slot.execution = _ok(reg, started, effect, self._record)
