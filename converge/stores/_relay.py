"""`relaying`: a run's streamed tokens written to its store, for the console to show.

With a store that is a `TokenRelay`, `Engine.run` and `resume` listen to the tokens of
streaming model calls (so `LlmSuggestor(stream=True)` streams under them too) and write each
call's text so far to the store: its last `LIVE_CHARS` characters, at most every
`RELAY_INTERVAL` seconds, and once more when the suggestor finishes. A cycle's text is
deleted when the cycle ends, the run's when it stops. A store that fails to take the text
is warned about once and no more written: the run itself never depends on its relay.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Final, final

import anyio

from .._core._events import CycleFinished, EngineEvent, SuggestorFailed, SuggestorFinished
from .._core._live_text import LIVE_CHARS, RELAY_INTERVAL, LiveText, TokenRelay
from .._core._tokens import TokenSink, token_sink, tokens_to
from .._kernel._config import RunConfig
from .._kernel._log import warn

__all__ = ["Relay", "relaying"]


@final
class Relay:
    """The token sink and observer of one run whose store relays its text."""

    __slots__ = (
        "_broken",
        "_clock",
        "_cycle",
        "_dirty",
        "_inner",
        "_last",
        "_run_id",
        "_store",
        "_texts",
        "_written",
    )

    event_types: Final = frozenset(
        {"run_started", "cycle_started", "suggestor_finished", "suggestor_failed", "cycle_finished"}
    )
    """What it follows: never an event per fact, which a run would build for it alone."""

    def __init__(
        self,
        store: TokenRelay,
        run_id: str,
        inner: TokenSink | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._inner = inner
        """The sink that listened before (`Engine.stream`'s): it gets every token too."""
        self._clock = clock
        self._cycle = 0
        self._last = -math.inf
        self._dirty: dict[tuple[str, int], LiveText] = {}
        """The text of each call written since the last write."""
        self._broken = False
        self._texts: dict[tuple[str, int], LiveText] = {}
        """The text of each call of the cycle."""
        self._written = False
        """Text was written since the last drop (a run that streams nothing writes nothing)."""

    async def __call__(self, suggestor: str, call: int, attempt: int, text: str, /) -> None:
        """Take the next piece of a call's text; write the run's text if it is time."""
        if self._inner is not None:
            await self._inner(suggestor, call, attempt, text)
        if self._broken:
            return
        key = (suggestor, call)
        known = self._texts.get(key)
        if known is None or known.attempt != attempt:  # a new call, or a retry starts again
            known = LiveText(
                cycle=self._cycle, suggestor=suggestor, call=call, attempt=attempt, text=""
            )
        whole = known.text + text
        cut = known.cut or len(whole) > LIVE_CHARS
        self._texts[key] = self._dirty[key] = LiveText(
            cycle=known.cycle,
            suggestor=suggestor,
            call=call,
            attempt=attempt,
            text=whole[-LIVE_CHARS:],
            cut=cut,
        )
        if self._clock() - self._last >= RELAY_INTERVAL:
            await self.flush()

    async def flush(self) -> None:
        """Write the text that changed since the last write."""
        if not self._dirty or self._broken:
            return
        texts, self._dirty = tuple(self._dirty.values()), {}
        self._last = self._clock()
        self._written = True
        await self._safely(self._store.put_live_text(self._run_id, texts))

    async def drop(self) -> None:
        """Delete the run's text (its cycle ended, or it stopped)."""
        self._texts.clear()
        self._dirty.clear()
        if self._written and not self._broken:
            self._written = False
            await self._safely(self._store.drop_live_text(self._run_id))

    async def on_event(self, event: EngineEvent, /) -> None:
        """Follow the run: its cycle; write at a suggestor's end; drop at the cycle's."""
        if event.run_id != self._run_id:
            return
        self._cycle = event.cycle
        if isinstance(event, SuggestorFinished | SuggestorFailed):
            await self.flush()
        elif isinstance(event, CycleFinished):
            await self.drop()

    async def _safely(self, write: Awaitable[None]) -> None:
        try:
            await write
        except Exception as error:  # the relay is for watching: the run goes on without it
            self._broken = True
            warn(
                "converge.relay",
                "token_relay_failed",
                run_id=self._run_id,
                store=type(self._store).__name__,
                error=f"{type(error).__name__}: {error}",
            )


@asynccontextmanager
async def relaying(store: object, run_id: str, config: RunConfig) -> AsyncGenerator[RunConfig]:
    """The run's `config`, relaying its tokens to `store` while in the block.

    Only when `store` is a `TokenRelay`; the run's text is deleted at the block's end,
    whatever ends it.
    """
    if not isinstance(store, TokenRelay):
        yield config
        return
    inner = token_sink()
    relay = Relay(store, run_id, inner)
    tokens_to(relay)
    try:
        yield replace(config, observers=(*config.observers, relay))
    finally:
        tokens_to(inner)
        with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
            await relay.drop()
