"""What a suggestor's call leaves for its record when the engine cancels it.

A call the engine cancels (its `suggestor_timeout`, the run's time budget) can neither return
nor raise anything of its own: the cancellation is what leaves it. An isolated call that is
cancelled kills its worker, and its `timed_out` record must still say which worker and why;
so it leaves a note here, in a context variable of the task that awaits it, and the executor
takes the note into the record. The note names the suggestor it belongs to, so a note that
nobody took (the run itself was cancelled) never lands on another call's record.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Final

from pydantic import JsonValue

__all__ = ["leave_note", "take_note"]

_NOTE: Final[ContextVar[tuple[object, Mapping[str, JsonValue]] | None]] = ContextVar(
    "converge_call_note", default=None
)


def leave_note(suggestor: object, metadata: Mapping[str, JsonValue]) -> None:
    """Leave `metadata` for the record of `suggestor`'s call, which is being cancelled."""
    _NOTE.set((suggestor, metadata))


def take_note(suggestor: object) -> Mapping[str, JsonValue] | None:
    """The note `suggestor`'s cancelled call left in this task, once; `None` if none."""
    note = _NOTE.get()
    if note is None:
        return None
    _NOTE.set(None)
    return note[1] if note[0] is suggestor else None
