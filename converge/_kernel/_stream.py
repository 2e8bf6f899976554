"""`stream_run`: a run's events as an async generator, its result last (`Engine.stream`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import replace
from typing import final

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._core._events import EngineEvent
from .._core._result import ConvergeResult
from .._core._tokens import TokenSink, TokenStreamed, tokens_to
from ._config import RunConfig

__all__ = ["stream_run"]


_Item = EngineEvent | TokenStreamed | ConvergeResult
"""What a stream yields."""


async def stream_run(
    run: Callable[[RunConfig], Awaitable[ConvergeResult]],
    config: RunConfig,
    buffer: int,
    *,
    tokens: bool = False,
) -> AsyncGenerator[_Item, None]:
    """Call `run` with `config` plus an observer that forwards every event; yield them all.

    With `tokens`, the run's task also sends the text of streaming model calls here
    (`TokenStreamed`, stamped with the run and cycle of the last event forwarded). The run
    waits for the consumer at phase boundaries and between tokens (nothing is dropped).
    Closing the generator cancels the run; an exception from `run` is re-raised to the consumer.
    """
    send, receive = anyio.create_memory_object_stream[_Item](buffer)
    channel = Channel(send)
    forwarding = replace(config, observers=(*config.observers, channel))
    failure: list[BaseException] = []
    sink = channel.token if tokens else None
    closed = False
    async with anyio.create_task_group() as group:
        group.start_soon(_produce, run, forwarding, send, failure, sink)
        try:
            async for item in receive:
                yield item
        except GeneratorExit:
            closed = True
            group.cancel_scope.cancel()
        finally:
            receive.close()
    if closed:
        raise GeneratorExit
    if failure:
        raise failure[0]


@final
class Channel:
    """Sends a run's events to the stream, and the tokens of its streaming calls, each
    token stamped with the run and cycle of the last event sent. (Not in `__all__`; its
    name is the one the run's `observer_failed` and `observer_timed_out` logs give.)"""

    __slots__ = ("_last", "_send")

    def __init__(self, send: MemoryObjectSendStream[_Item]) -> None:
        self._send = send
        self._last: EngineEvent | None = None

    async def on_event(self, event: EngineEvent, /) -> None:
        self._last = event
        await self._send.send(event)

    async def token(self, suggestor: str, call: int, attempt: int, text: str, /) -> None:
        last = self._last
        run_id, cycle = ("", 0) if last is None else (last.run_id, last.cycle)
        token = TokenStreamed(
            run_id=run_id, cycle=cycle, suggestor=suggestor, call=call, attempt=attempt, text=text
        )
        await self._send.send(token)


async def _produce(
    run: Callable[[RunConfig], Awaitable[ConvergeResult]],
    config: RunConfig,
    send: MemoryObjectSendStream[_Item],
    failure: list[BaseException],
    sink: TokenSink | None,
) -> None:
    """The stream's task: call `run` with `config` (its token calls sent to `sink`, when
    given) and send its result last; what it raises goes to `failure`, for the consumer."""
    if sink is not None:
        tokens_to(sink)  # this task's and those it starts: the run's suggestors' calls
    try:
        async with send:
            result = await run(config)
            await send.send(result)
    except anyio.BrokenResourceError:  # the consumer went away
        pass
    except anyio.get_cancelled_exc_class():
        raise
    except BaseException as error:  # re-raised to the consumer as `run` would raise it
        # a `KeyboardInterrupt` a suggestor raised too: out of this task, asyncio would
        # let it escape the event loop
        failure.append(error)
