"""`ConvergeError`, the root of every error converge raises, `ConfigurationError`, which
the lowest modules raise too, and `SuggestorExitError` with the `Stopped` it reports (the
whole tree is in `_exceptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, final

__all__ = [
    "ConfigurationError",
    "ConvergeError",
    "Stopped",
    "SuggestorExitError",
    "UsageError",
    "describe_error",
]


class ConvergeError(Exception):
    """The root of every error converge raises."""


class ConfigurationError(ConvergeError, ValueError):
    """The engine or a registration is set up wrongly; raised before anything runs."""


@final
@dataclass(frozen=True, slots=True)
class Stopped:
    """Where a suggestor's `BaseException` stopped a run, and whether the run was saved."""

    suggestor: str
    """The suggestor that raised it."""
    phase: Literal["accepts", "execute"]
    """The call that raised it."""
    cycle: int
    """The cycle it was raised in."""
    run_id: str
    """The run it stopped."""
    saved: bool | None
    """Whether the run was saved as interrupted (`None`: it is saved only when it ends)."""

    def describe(self) -> str:
        """`suggestor 'x' raised it in execute(), cycle 2 of run ID; the run ...` (one line)."""
        if self.saved is None:
            kept = (
                "nothing was saved (a run is saved as it goes only with a store and "
                'durability="cycle")'
            )
        elif self.saved:
            kept = "it was saved as interrupted, to be continued from its last merged cycle"
        else:
            kept = "saving it as interrupted failed (the log says why)"
        return (
            f"suggestor {self.suggestor!r} raised it in {self.phase}(), cycle {self.cycle} "
            f"of run {self.run_id}, which stopped there; {kept}"
        )


class SuggestorExitError(ConvergeError):
    """A suggestor raised `SystemExit` (it called `sys.exit()`): the run stopped there.

    The `SystemExit` is its `__cause__`; the run was saved as interrupted when the engine
    saves after every cycle (`saved`), and `Engine.resume_run` continues it.
    """

    suggestor: str
    """The suggestor that raised it."""
    cycle: int
    """The cycle it was raised in."""
    run_id: str
    """The run it stopped."""
    saved: bool | None
    """Whether the run was saved as interrupted (`None`: it had no per-cycle saves)."""
    code: object
    """The exit status the suggestor asked for (`SystemExit.code`)."""

    def __init__(self, exit: SystemExit, stopped: Stopped) -> None:
        super().__init__(f"SystemExit({exit.code!r}): {stopped.describe()}")
        self.suggestor = stopped.suggestor
        self.cycle = stopped.cycle
        self.run_id = stopped.run_id
        self.saved = stopped.saved
        self.code = exit.code


class UsageError(Exception):
    """What was asked cannot be done as asked: reported as one line and a hint, without a
    traceback (by the command line, the review console and batches alike)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def describe_error(error: BaseException) -> str:
    """`"TypeName: message"`, or the type name alone when the message is empty; an exception
    whose `str()` raises is named with what it raised."""
    kind = type(error).__name__
    try:
        message = str(error)
    except Exception as failed:  # a hostile or broken __str__
        return f"{kind} (its str() raised {type(failed).__name__})"
    if type(message) is not str:  # a subclass: its plain text, none of its own methods
        message = str.__str__(message)
    return f"{kind}: {message}" if message else kind
