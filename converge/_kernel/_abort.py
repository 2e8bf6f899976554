"""A suggestor's `BaseException`: it stops the run at once, as the engine's own stop.

`KeyboardInterrupt`, `SystemExit`, `GeneratorExit` or any other `BaseException` but the
backend's cancellation, raised by a suggestor's `accepts` or `execute`, is never isolated as
a failed call. Where it is caught (`LiveEffects`, `Executor`) it becomes a `SuggestorAbort`,
an ordinary exception that carries it out of the run, past task groups that would wrap it in
an exception group and past asyncio, which lets a `KeyboardInterrupt` or `SystemExit` out of
a task escape the event loop itself. The run loop saves the run as interrupted and says what
happened (`stopped`); the engine then raises what the suggestor raised (`reraise`):
`KeyboardInterrupt` and any other `BaseException` as they are, a note added; `SystemExit` as a
`SuggestorExitError`, since a script whose suggestor called `sys.exit(0)` must not end with
status 0 and nothing printed.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final, Literal, TypeVar, final

from .._core._error import Stopped, SuggestorExitError

__all__ = ["SuggestorAbort", "reraise", "stopped_by"]

T = TypeVar("T")

_STOPPED: Final = "_converge_stopped"
"""The attribute of a re-raised exception that holds its `Stopped`."""


@final
class SuggestorAbort(Exception):
    """Carries a suggestor's `BaseException` from where it was caught to the run's end."""

    def __init__(self, error: BaseException, suggestor: str, phase: Literal["accepts", "execute"]):
        super().__init__(suggestor, phase)
        self.error = error
        self.suggestor = suggestor
        self.phase: Literal["accepts", "execute"] = phase
        self.stopped: Stopped | None = None
        """Set by the run loop once the run is saved (or not)."""

    def stop(self, cycle: int, run_id: str, saved: bool | None) -> None:
        """Record where the run stopped and whether it was saved."""
        self.stopped = Stopped(self.suggestor, self.phase, cycle, run_id, saved)


async def reraise(work: Awaitable[T]) -> T:
    """`await work`; a `SuggestorAbort` out of it raised as what the suggestor raised.

    The exception is raised outside any handler, so it is chained to nothing of the engine's.
    """
    try:
        return await work
    except SuggestorAbort as abort:
        caught = abort
    error = caught.error
    stopped = caught.stopped
    if stopped is None:  # the run loop records it; raised as it is if not
        raise error
    if isinstance(error, SystemExit):
        exit_error = SuggestorExitError(error, stopped)
        setattr(exit_error, _STOPPED, stopped)
        raise exit_error from error
    error.add_note(f"converge: {stopped.describe()}")
    setattr(error, _STOPPED, stopped)
    raise error


def stopped_by(error: BaseException) -> Stopped | None:
    """Where `error` stopped a run, if a suggestor raised it and the engine re-raised it."""
    found: object = getattr(error, _STOPPED, None)
    return found if isinstance(found, Stopped) else None
