"""Streamed tokens: `TokenStreamed` events of a running model call, for `Engine.stream` only.

`Engine.stream` sets a sink for the run's task (a context variable, which every task of the
run inherits); a suggestor's model call that streams hands it each piece of text as it comes
(`token_sink`). Nothing else ever sees a token event: not the observers, the record, the
trace or the integrity proof. Without a sink (`run`, `resume`, an isolated suggestor's worker
process), `token_sink()` is `None` and a streaming suggestor makes its ordinary call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from typing import Literal, Protocol, TypeVar, final

from ._model import FrozenModel

__all__ = ["TokenSink", "TokenStreamed", "token_sink", "tokens_to", "unheard"]

_T = TypeVar("_T")


@final
class TokenStreamed(FrozenModel, frozen=True):
    """A piece of the text a suggestor's model call is generating, as it comes.

    Only `Engine.stream` yields it, never an observer; it is never recorded. The text of one
    call's events, joined in order, is the reply's text so far; an event with a higher
    `attempt` starts that text again (the earlier attempt failed and was retried).
    """

    type: Literal["token"] = "token"
    """Discriminator."""
    run_id: str
    """The run it belongs to."""
    cycle: int
    """The cycle whose suggestor is calling the model."""
    suggestor: str
    """The suggestor's name."""
    call: int
    """Which model call of the suggestor's `execute` it is: 1, 2, ... (a tool turn or a
    repair is a new call)."""
    attempt: int
    """Which HTTP attempt of the call: 1, then 2, ... after a retry."""
    text: str
    """The new text."""


class TokenSink(Protocol):
    """Takes the text of a running model call as it comes (see `token_sink`)."""

    def __call__(self, suggestor: str, call: int, attempt: int, text: str, /) -> Awaitable[None]:
        """Hand on `text`, the next piece of `suggestor`'s model call `call`."""
        ...


_SINK: ContextVar[TokenSink | None] = ContextVar("converge_token_sink", default=None)


def token_sink() -> TokenSink | None:
    """Where a suggestor's streaming model call sends its text: `None` when nobody listens
    (the run is not an `Engine.stream`), and the call should then not stream at all."""
    return _SINK.get()


def tokens_to(sink: TokenSink | None) -> None:
    """Send the tokens of the current task (and the tasks it starts) to `sink`."""
    _SINK.set(sink)


async def unheard(call: Awaitable[_T]) -> _T:
    """Await `call` with no sink: a run started inside a streamed one (a suggestor running
    an engine of its own) does not stream into it."""
    if _SINK.get() is None:
        return await call
    reset = _SINK.set(None)
    try:
        return await call
    finally:
        _SINK.reset(reset)
