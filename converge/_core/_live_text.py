"""The text of a running model call, relayed through a store to another process (the console).

A store that is a `TokenRelay` keeps, beside its runs and never in their records, the latest
text of each model call a run is making (`LiveText`): the run writes it as the tokens come
(at most `RELAY_INTERVAL` apart, the last `LIVE_CHARS` characters), and deletes a run's text
when its cycle ends and when the run stops. Text not written for `STALE_SECONDS` (a run
killed mid-call) is never read again and is deleted by the next write to the same store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, runtime_checkable

from pydantic import Field

from ._model import FrozenModel

__all__ = ["LIVE_CHARS", "RELAY_INTERVAL", "STALE_SECONDS", "LiveText", "TokenRelay"]

LIVE_CHARS: Final = 4000
"""The characters of a call's text kept: its last ones."""
RELAY_INTERVAL: Final = 0.1
"""Seconds between two writes of a run's text (at most 10 a second)."""
STALE_SECONDS: Final = 600.0
"""Text not written for this long is the leftover of a run that died: never read again."""


class LiveText(FrozenModel, frozen=True):
    """The text so far of one model call of a running suggestor (its last `LIVE_CHARS`)."""

    cycle: int = Field(ge=0)
    """The cycle the call belongs to."""
    suggestor: str
    """The suggestor's name."""
    call: int = Field(ge=1)
    """Which model call of the suggestor's `execute` it is: 1, 2, ..."""
    attempt: int = Field(ge=1)
    """Which HTTP attempt of the call (a retry starts the text again)."""
    text: str = Field(max_length=LIVE_CHARS)
    """The call's text so far: its last `LIVE_CHARS` characters."""
    cut: bool = False
    """Whether earlier text was left out."""


@runtime_checkable
class TokenRelay(Protocol):
    """A store that relays the text of running model calls (see the module)."""

    async def put_live_text(self, run_id: str, texts: Sequence[LiveText], /) -> None:
        """Replace the text of these calls of `run_id` (and delete stale text)."""
        ...

    async def drop_live_text(self, run_id: str, /) -> None:
        """Delete all the text of `run_id`."""
        ...

    async def live_text(self, run_id: str, /) -> tuple[LiveText, ...]:
        """The text of `run_id`'s running calls (none stale), by suggestor and call."""
        ...
