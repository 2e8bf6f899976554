"""Run the eligible suggestors of a cycle concurrently against one snapshot.

Results come back in registration order, never completion order. A failure or timeout is
isolated into an `Execution` record unless the engine is set to re-raise. A `BaseException`
other than a cancellation (`KeyboardInterrupt`, `SystemExit`) cancels the cycle's other calls
and stops the run (`_abort`). What a call returned is checked by `_effect_check`.

Only a cancellation somebody requested is a cancellation: a suggestor that raises the
backend's cancellation exception while nothing is cancelling its call has failed. A result
that comes back after its time limit (the suggestor blocked the event loop, or swallowed its
cancellation) is a timeout, and its effect is dropped.

Every call of a suggestor's `execute` is made here. A cycle's lone suggestor with no time
limit, most cycles of a chain, is awaited directly (`Executor.alone`): no slot, task, cancel
scope or wrapper around it, and the run's `CancelWatch` tells its stray cancellation from
the run's (a cancel scope of its own measured W4 +41 %).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from math import inf
from time import perf_counter
from types import CoroutineType
from typing import Any, Literal, final

import anyio
import anyio.lowlevel

from .._core._call_note import take_note
from .._core._context import ContextSnapshot
from .._core._effect import AgentEffect
from ._abort import SuggestorAbort
from ._calls import CUT, Recorder, Returned, Slot, failure, returned
from ._effect_check import checked_effect
from ._registry import Registration
from ._watch import CancelWatch, raise_if_cancelled

__all__ = ["LATE", "ErrorMode", "Executor"]

ErrorMode = Literal["isolate", "raise"]

LATE = "time budget exhausted: execute() returned after the run's deadline"
"""The error of a result that came back after the run's time budget ran out."""


@final
class Executor:
    """Calls `execute` on each eligible suggestor, at most `max_concurrency` at once."""

    __slots__ = ("_aborted", "_group", "_limiter", "_mode", "_record", "_timeout", "_watch")

    def __init__(
        self,
        *,
        max_concurrency: int | None,
        timeout: float | None,
        mode: ErrorMode,
        record_effects: Recorder | None = None,
        watch: CancelWatch | None = None,
    ) -> None:
        self._record = record_effects
        self._watch = CancelWatch() if watch is None else watch
        """The run's watch (`alone`): what tells a lone call's stray cancellation."""
        self._limiter = None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency)
        self._timeout = timeout
        self._mode = mode
        self._aborted: SuggestorAbort | None = None
        """The first `BaseException` a call of this cycle raised, to raise once all stopped."""
        self._group: anyio.CancelScope | None = None
        """The cancel scope of the cycle's task group, while its calls run."""

    async def run(
        self, slots: Sequence[Slot], snapshot: ContextSnapshot, deadline: float | None = None
    ) -> None:
        """Execute each slot's suggestor against `snapshot`, filling the slots in place.

        Slots stay in registration order; a slot whose call was cancelled keeps no execution.
        `deadline` (a `perf_counter()` time) is the run's: a result after it is dropped.

        Raises:
            SuggestorAbort: A call raised a `BaseException` other than a cancellation; the
                cycle's other calls were cancelled.
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
                self._group = group.cancel_scope
                for slot in slots:
                    group.start_soon(call, slot, snapshot, deadline, name=slot.reg.name)
            self._group = None
        aborted = self._aborted
        if aborted is not None:
            self._aborted = None
            raise aborted
        if self._mode == "raise":
            for slot in slots:
                if slot.error is not None:
                    raise slot.error

    async def alone(
        self, reg: Registration, snapshot: ContextSnapshot
    ) -> tuple[AgentEffect, Returned] | Slot:
        """Await the lone eligible suggestor of a cycle without a time limit, directly.

        Returns its checked effect and what its record says, allocating nothing else on
        success; or the slot of its failure (an error, a stray cancellation, or what is not
        an effect). The run's cancellation propagates, and one the call swallowed is raised
        (`CancelWatch.honour`); a `BaseException` other than a cancellation stops the run.

        Raises:
            SuggestorAbort: The call raised a `BaseException` other than a cancellation.
        """
        watch = self._watch
        resumed, native = watch.resumed, watch.native
        started = perf_counter()
        try:
            effect = await reg.suggestor.execute(snapshot)
        except BaseException as error:
            return await self._lone_failed(reg, error, started, resumed, native)
        finished = perf_counter()
        if watch.resumed != resumed:  # it suspended: it may have swallowed a cancellation
            await watch.honour(native)
        checked = checked_effect(effect, reg.name)
        if isinstance(checked, str):
            slot = Slot(reg)
            slot.failed(started, TypeError(checked))
            return self._isolated(slot)
        return checked, returned(reg, checked, started, finished, self._record)

    async def _lone_failed(
        self, reg: Registration, error: BaseException, started: float, resumed: int, native: int
    ) -> Slot:
        """The slot of a lone call that raised `error`: its failure, unless the run was
        cancelled meanwhile (through a cancel scope, or natively since the watch counted
        `native`), which goes on; a `KeyboardInterrupt`, `SystemExit` or other
        `BaseException` stops the run (`SuggestorAbort`)."""
        watch = self._watch
        slot = Slot(reg)
        if isinstance(error, Exception):
            if watch.resumed != resumed:  # it may have turned a cancellation into this
                await watch.honour(native)
            slot.failed(started, error)
        elif isinstance(error, anyio.get_cancelled_exc_class()):
            if watch.native != native:
                raise error
            await raise_if_cancelled(error)
            slot.stray(started, error)
        else:
            raise SuggestorAbort(error, reg.name, "execute") from None
        return self._isolated(slot)

    def _isolated(self, slot: Slot) -> Slot:
        """A lone call's failed `slot`, its error raised in `"raise"` mode."""
        if self._mode == "raise" and slot.error is not None:
            raise slot.error
        return slot

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
                    await raise_if_cancelled(error)
                    slot.stray(started, error)
            if slot.execution is not None:
                return
        except Exception as error:  # isolated: recorded, never swallowed silently
            slot.failed(started, error)
            return
        except BaseException as error:
            if isinstance(error, anyio.get_cancelled_exc_class()):
                note = take_note(slot.reg.suggestor)
                if note is not None:  # an isolated call the run's time budget cut: its worker
                    slot.execution = failure(slot.reg, "timed_out", started, CUT, note=note)
                raise  # the caller's cancellation: the calls above tell a stray one
            self._abort(slot, error)
            return
        finished = perf_counter()
        if limit < inf and self._late(slot, started, finished, cancelled, deadline):
            return
        self.settle(slot, effect, started, finished)

    def _abort(self, slot: Slot, error: BaseException) -> None:
        """Keep the first `BaseException` of the cycle and cancel the other calls.

        Kept, not raised: out of a task, asyncio would let a `KeyboardInterrupt` or
        `SystemExit` escape the event loop, and the task group would wrap it in a group.
        """
        if self._aborted is None:
            self._aborted = SuggestorAbort(error, slot.reg.name, "execute")
        group = self._group
        if group is not None:
            group.cancel()

    def settle(self, slot: Slot, effect: object, started: float, finished: float) -> None:
        """Fill the slot with the effect a call returned in time, checked, or its failure."""
        checked = checked_effect(effect, slot.reg.name)
        if isinstance(checked, str):
            slot.failed(started, TypeError(checked))
        else:
            slot.succeeded(checked, started, finished, self._record)

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
            slot.stray(started, stray)
        elif scope.cancelled_caught:
            error = TimeoutError(f"no effect within {timeout} s")
            note = take_note(slot.reg.suggestor)  # an isolated call's killed worker
            slot.execution = failure(slot.reg, "timed_out", started, error, note=note)
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
    """Awaits a call's steps as `await` would, timing each against `limit`.

    A step still running when the limit (a `perf_counter()` time) passed held the event
    loop, so nothing could cancel it; its length goes to `slot.held`.
    """

    __slots__ = ("_limit", "_slot", "_steps")

    def __init__(self, steps: _Steps, slot: Slot, limit: float) -> None:
        self._steps = steps
        self._slot = slot
        self._limit = limit

    def _step(self, step: Callable[[Any], Any], value: object) -> tuple[bool, object]:
        """Run one step: `(True, result)` when the call returned, `(False, yielded)` if not."""
        begun = perf_counter()
        try:
            return False, step(value)
        except StopIteration as stop:
            result: object = stop.value
            return True, result
        finally:
            ended = perf_counter()
            if begun <= self._limit < ended:
                self._slot.held = ended - begun

    def __await__(self) -> Generator[Any, Any, object]:
        steps = self._steps
        done, value = self._step(steps.send, None)
        while not done:
            try:
                sent = yield value
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as error:  # thrown in by the event loop
                done, value = self._step(steps.throw, error)
            else:
                done, value = self._step(steps.send, sent)
        return value
