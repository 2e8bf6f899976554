"""`CancelWatch`: the cancellations the event loop throws into a run's task natively.

A suggestor that raises the backend's cancellation exception while nothing is cancelling its
call has failed (a stray cancellation); one that lets a cancellation of the run through has
not. Whoever cancels through a cancel scope leaves a pending cancellation that
`has_pending_cancellation` sees. asyncio's own `Task.cancel` (an `asyncio.timeout` or
`wait_for` around `engine.run`) leaves nothing once it is delivered, so a run's cycles are
awaited through its watch (`watching`), which steps them as `await` would and counts each
time the task resumes, and each cancellation thrown in while no cancel scope of the task was
cancelled. A call that raised a cancellation was cancelled natively if that count moved
while it ran. A call that suspended and then returned (or raised another error) may have
swallowed the run's cancellation: thrown in natively, or pending in a cancel scope; the
run's cancellation goes on all the same (`honour`).

One watch per run, not one wrapper per call: a call awaited directly costs what `await`
costs, and only a run that suspends pays for the watch, one step each time it resumes.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar, final

import anyio
import anyio.lowlevel

__all__ = ["CancelWatch", "raise_if_cancelled"]

T = TypeVar("T")


async def raise_if_cancelled(error: BaseException) -> None:
    """Raise the task's cancellation if a cancel scope is cancelling it; else return."""
    if anyio.get_current_task().has_pending_cancellation():
        await anyio.lowlevel.checkpoint()  # raises the scope's own cancellation
        raise error


@final
class CancelWatch:
    """Counts the resumes of the run it watches, and the native cancellations thrown in."""

    __slots__ = ("native", "resumed")

    def __init__(self) -> None:
        self.resumed = 0
        """How many times the event loop resumed the run's task (a call suspended)."""
        self.native = 0
        """How many cancellations it threw in while no cancel scope of the task was
        cancelling."""

    async def honour(self, native: int) -> None:
        """After a call that suspended returned (or raised something else than a
        cancellation): raise the run's cancellation if it swallowed one, thrown in natively
        since the count was `native` or pending in a cancel scope (trio's, and anyio's on
        any backend, stay pending until they are raised); return if there is none."""
        if self.native != native:
            raise anyio.get_cancelled_exc_class()(
                "the run was cancelled while a suggestor ran, and the suggestor swallowed it"
            )
        if anyio.get_current_task().has_pending_cancellation():
            await anyio.lowlevel.checkpoint()  # raises the scope's own cancellation

    def watching(self, coroutine: Coroutine[Any, Any, T], /) -> _Watched[T]:
        """`coroutine`, to await: stepped as `await` steps it, its cancellations counted."""
        return _Watched(coroutine, self)


@final
class _Watched(Generic[T]):
    __slots__ = ("_steps", "_watch")

    def __init__(self, steps: Coroutine[Any, Any, T], watch: CancelWatch) -> None:
        self._steps = steps
        self._watch = watch

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self._steps
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                yielded = steps.send(sent) if thrown is None else steps.throw(thrown)
            except StopIteration as stop:
                value: T = stop.value
                return value
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as error:  # thrown in by the event loop
                if isinstance(error, anyio.get_cancelled_exc_class()):
                    self._noted()
                sent, thrown = None, error
            self._watch.resumed += 1

    def _noted(self) -> None:
        if not anyio.get_current_task().has_pending_cancellation():
            self._watch.native += 1
