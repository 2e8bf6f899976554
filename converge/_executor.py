"""Run the eligible suggestors of a cycle concurrently against one snapshot.

Results come back in registration order, never completion order. A failure or timeout is
isolated into an `Execution` record unless the engine is set to re-raise.

Only a cancellation somebody requested is a cancellation: a suggestor that raises the
backend's cancellation exception while nothing is cancelling its call has failed. A result
that comes back after its time limit (the suggestor blocked the event loop, or swallowed its
cancellation) is a timeout, and its effect is dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from math import inf
from time import perf_counter
from types import CoroutineType
from typing import Any, Final, Literal, final

import anyio
import anyio.lowlevel

from ._calls import Slot, describe_error, failure
from ._context import ContextSnapshot
from ._effect import AgentEffect

__all__ = ["LATE", "ErrorMode", "Executor"]

ErrorMode = Literal["isolate", "raise"]

LATE = "time budget exhausted: execute() returned after the run's deadline"
"""The error of a result that came back after the run's time budget ran out."""


@final
class Executor:
    """Calls `execute` on each eligible suggestor, at most `max_concurrency` at once."""

    __slots__ = ("_limiter", "_mode", "_record", "_timeout", "_unlimited")

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
        self._unlimited = max_concurrency is None and timeout is None and mode == "isolate"

    def begin(
        self, slots: Sequence[Slot], snapshot: ContextSnapshot, deadline: float | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """`run`, started in the caller's frame: `None` when every call is done (the slots
        filled), else the coroutine that finishes them, to await.

        A lone suggestor with no limit at all (no limiter, timeout or deadline, and failures
        isolated) runs here up to its first suspension, with no coroutine of the executor's
        around it: most cycles of a chain have one eligible suggestor, whose `execute`
        returns without awaiting.
        """
        if self._unlimited and deadline is None and len(slots) == 1:
            return self._start(slots[0], snapshot)
        return self.run(slots, snapshot, deadline)

    async def run(
        self, slots: Sequence[Slot], snapshot: ContextSnapshot, deadline: float | None = None
    ) -> None:
        """Execute each slot's suggestor against `snapshot`, filling the slots in place.

        Slots stay in registration order; a slot whose call was cancelled keeps no execution.
        `deadline` (a `perf_counter()` time) is the run's: a result after it is dropped.
        """
        if len(slots) == 1:
            # a lone suggestor needs no task group: it runs in the caller's task
            if self._limiter is None:
                await self._call(slots[0], snapshot, deadline, True)
            else:
                await self._run_one(slots[0], snapshot, deadline, True)
        elif slots:
            call = self._call if self._limiter is None else self._run_one
            async with anyio.create_task_group() as group:
                for slot in slots:
                    group.start_soon(call, slot, snapshot, deadline, name=slot.reg.name)
        if self._mode == "raise":
            for slot in slots:
                if slot.error is not None:
                    raise slot.error

    async def _run_one(
        self, slot: Slot, snapshot: ContextSnapshot, deadline: float | None, lone: bool = False
    ) -> None:
        limiter = self._limiter
        if limiter is None:
            await self._call(slot, snapshot, deadline, lone)
        else:
            async with limiter:
                await self._call(slot, snapshot, deadline, lone)

    async def _call(
        self, slot: Slot, snapshot: ContextSnapshot, deadline: float | None, lone: bool = False
    ) -> None:
        timeout = self._timeout
        if lone and timeout is None and deadline is None:
            pending = self._start(slot, snapshot)
            if pending is not None:
                await pending
            return
        started = perf_counter()
        limit = inf if timeout is None else started + timeout
        if deadline is not None and deadline < limit:
            limit = deadline
        cancelled = False
        effect: object = None
        try:
            call: Awaitable[object] = slot.reg.suggestor.execute(snapshot)
            if limit < inf:  # time its steps, to tell whether it held the event loop
                call = _Driven(_steps_of(call), slot, limit)
            if lone or timeout is not None:
                effect, cancelled = await self._scoped(slot, call, started)
            else:
                # A task of the cycle's group: whoever cancels it does so through a cancel
                # scope, which `has_pending_cancellation` sees.
                try:
                    effect = await call
                except anyio.get_cancelled_exc_class() as error:
                    await _raise_if_cancelled(error)
                    _stray(slot, started, error)
            if slot.execution is not None:
                return
        except Exception as error:  # isolated: recorded, never swallowed silently
            _failed(slot, started, error)
            return
        finished = perf_counter()
        if limit < inf and self._late(slot, started, finished, cancelled, deadline):
            return
        self._settle(slot, effect, started, finished)

    def _start(self, slot: Slot, snapshot: ContextSnapshot) -> Coroutine[Any, Any, None] | None:
        """Call a lone suggestor with no time limit, up to its first suspension, in the
        caller's frame; `None` when the call is done, else the coroutine awaiting the rest.

        A call that finishes without awaiting cannot have been cancelled. One that awaits
        goes on through `_Driven`, which notes a native cancellation of the task (asyncio's
        `Task.cancel`, which leaves no trace a cancel scope could show).
        """
        started = perf_counter()
        try:
            call = slot.reg.suggestor.execute(snapshot)
            # `_steps_of`, inlined: this path is every cycle's with one eligible suggestor
            steps: _Steps = call if type(call) is _COROUTINE else call.__await__()
        except Exception as error:  # isolated: recorded, never swallowed silently
            _failed(slot, started, error)
            return None
        try:
            first = steps.send(None)
        except StopIteration as stop:
            effect: object = stop.value
        except Exception as error:
            _failed(slot, started, error)
            return None
        except anyio.get_cancelled_exc_class() as error:
            return _cancelled(slot, started, error)
        else:
            return self._resume(slot, _Driven(steps, slot, inf, first), started)
        self._settle(slot, effect, started, perf_counter())
        return None

    async def _resume(self, slot: Slot, driven: _Driven, started: float) -> None:
        """Await the rest of a call `_start` began."""
        try:
            effect = await driven
        except anyio.get_cancelled_exc_class() as error:
            if driven.cancelled_natively:
                raise
            await _cancelled(slot, started, error)
            return
        except Exception as error:
            _failed(slot, started, error)
            return
        self._settle(slot, effect, started, perf_counter())

    def _settle(self, slot: Slot, effect: object, started: float, finished: float) -> None:
        """Fill the slot with the effect a call returned in time, checked, or its failure."""
        name = slot.reg.name
        if not isinstance(effect, AgentEffect):
            error = TypeError(
                f"execute() of {name!r} returned {type(effect).__name__}, expected AgentEffect"
            )
            _failed(slot, started, error)
        elif type(effect.proposals) is not tuple or type(effect.tokens) is not int:
            error = TypeError(  # an AgentEffect built around validation (model_construct)
                f"execute() of {name!r} returned an AgentEffect that skipped validation "
                f"(proposals: {type(effect.proposals).__name__}, "
                f"tokens: {type(effect.tokens).__name__})"
            )
            _failed(slot, started, error)
        else:
            slot.succeeded(effect, started, finished, self._record)

    async def _scoped(
        self, slot: Slot, call: Awaitable[object], started: float
    ) -> tuple[object, bool]:
        """Await `call` in a cancel scope of its own, under the timeout if there is one.

        Returns the result and whether the timeout fired, or fills the slot when the call
        timed out or raised a cancellation nobody requested: the scope tells a cancellation
        of the caller (which propagates) from one nobody requested (a failure).
        """
        timeout = self._timeout
        stray: BaseException | None = None
        effect: object = None
        with anyio.CancelScope() if timeout is None else anyio.move_on_after(timeout) as scope:
            try:
                effect = await call
            except anyio.get_cancelled_exc_class() as error:
                if not scope.cancel_called:
                    stray = error  # unless the probe below shows someone is cancelling
                    scope.cancel()
                # Raises again: a cancellation of this scope alone ends here, the caller's
                # (an outer scope, or a native cancellation of the task) propagates.
                await anyio.lowlevel.checkpoint()
                raise
        if stray is not None:
            _stray(slot, started, stray)
        elif scope.cancelled_caught:
            error = TimeoutError(f"no effect within {timeout} s")
            slot.execution = failure(slot.reg, "timed_out", started, error)
            slot.error = error
        return effect, scope.cancel_called

    def _late(
        self, slot: Slot, started: float, finished: float, cancelled: bool, deadline: float | None
    ) -> bool:
        """Fill the slot if the result came back past the timeout or the run's deadline."""
        timeout = self._timeout
        took = finished - started
        if timeout is not None and (cancelled or took > timeout):
            if cancelled:
                how = "execute() returned after it was cancelled"
            elif slot.held is not None:
                how = f"execute() held the event loop for {slot.held:.3f} s"
            else:
                how = f"execute() returned after {took:.3f} s"
            error = TimeoutError(f"no effect within {timeout} s: {how}")
            slot.execution = failure(slot.reg, "timed_out", started, error)
            slot.error = error
            return True
        if deadline is not None and finished > deadline:
            slot.execution = failure(slot.reg, "timed_out", started, LATE)
            slot.late = True
            return True
        return False


async def _cancelled(slot: Slot, started: float, error: BaseException) -> None:
    """A cancellation exception out of a lone call: the task's, or a failure if nothing is
    cancelling it."""
    await _raise_if_cancelled(error)
    _stray(slot, started, error)


async def _raise_if_cancelled(error: BaseException) -> None:
    """Raise the task's cancellation if a cancel scope is cancelling it; else return."""
    if anyio.get_current_task().has_pending_cancellation():
        await anyio.lowlevel.checkpoint()  # raises the scope's own cancellation
        raise error


_UNSTARTED: Final = object()
_Steps = Generator[Any, Any, object] | Coroutine[Any, Any, object]
"""A call's steps: its `__await__` iterator, or the coroutine itself."""
_COROUTINE: type[Coroutine[Any, Any, object]] = CoroutineType
"""Declared, not `Final`: pyright narrows `type(call) is _COROUTINE` to the declared type."""


def _steps_of(call: Awaitable[object]) -> _Steps:
    """What steps `call`: a coroutine itself (its `__await__` wrapper would add a call to
    every step), any other awaitable its `__await__` iterator."""
    steps: _Steps = call if type(call) is _COROUTINE else call.__await__()
    return steps


@final
class _Driven:
    """Awaits a call's steps as `await` would, noting what happens between them.

    `cancelled_natively` is set when the event loop threw a cancellation into the call while
    no cancel scope of the task was cancelled: asyncio's own `Task.cancel` (trio and cancel
    scopes leave a pending cancellation that `has_pending_cancellation` sees).

    With a `limit` (a `perf_counter()` time), each step is timed: one still running when the
    limit passed held the event loop, so nothing could cancel it; its length goes to
    `slot.held`.
    """

    __slots__ = ("_first", "_limit", "_slot", "_steps", "cancelled_natively")

    def __init__(
        self,
        steps: _Steps,
        slot: Slot,
        limit: float,
        first: object = _UNSTARTED,
    ) -> None:
        self._steps = steps
        self._slot = slot
        self._limit = limit
        self._first = first
        self.cancelled_natively = False

    def _step(self, step: Callable[[Any], Any], value: object) -> tuple[bool, object]:
        """Run one step: `(True, result)` when the call returned, `(False, yielded)` if not."""
        limit = self._limit
        begun = perf_counter() if limit < inf else 0.0
        try:
            return False, step(value)
        except StopIteration as stop:
            result: object = stop.value
            return True, result
        finally:
            if limit < inf:
                ended = perf_counter()
                if begun <= limit < ended:
                    self._slot.held = ended - begun

    def _thrown(self) -> None:
        if not anyio.get_current_task().has_pending_cancellation():
            self.cancelled_natively = True

    def __await__(self) -> Generator[Any, Any, object]:
        steps = self._steps
        if self._first is _UNSTARTED:
            done, value = self._step(steps.send, None)
        else:
            done, value = False, self._first
        while not done:
            try:
                sent = yield value
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as error:  # thrown in by the event loop
                if isinstance(error, anyio.get_cancelled_exc_class()):
                    self._thrown()
                done, value = self._step(steps.throw, error)
            else:
                done, value = self._step(steps.send, sent)
        return value


def _failed(slot: Slot, started: float, error: Exception) -> None:
    """Record a call that raised (or returned what is not an effect) as a failure."""
    slot.execution = failure(slot.reg, "failed", started, error)
    slot.error = error


def _stray(slot: Slot, started: float, error: BaseException) -> None:
    """Record a cancellation exception that nothing requested as a failure."""
    reg = slot.reg
    text = f"{describe_error(error)}, raised while nothing was cancelling the call"
    slot.execution = failure(reg, "failed", started, error, text=text)
    wrapped = RuntimeError(f"execute() of {reg.name!r}: {text}")
    wrapped.__cause__ = error
    slot.error = wrapped
