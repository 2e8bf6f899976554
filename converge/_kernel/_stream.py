"""`stream_run`: a run's events as an async generator, its result last (`Engine.stream`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import replace

import anyio

from .._core._events import EngineEvent
from .._core._result import ConvergeResult
from .._core._tokens import TokenStreamed, tokens_to
from ._config import RunConfig

__all__ = ["stream_run"]


async def stream_run(
    run: Callable[[RunConfig], Awaitable[ConvergeResult]],
    config: RunConfig,
    buffer: int,
    *,
    tokens: bool = False,
) -> AsyncGenerator[EngineEvent | TokenStreamed | ConvergeResult, None]:
    """Call `run` with `config` plus an observer that forwards every event; yield them all.

    With `tokens`, the run's task also sends the text of streaming model calls here
    (`TokenStreamed`, stamped with the run and cycle of the last event forwarded). The run
    waits for the consumer at phase boundaries and between tokens (nothing is dropped).
    Closing the generator cancels the run; an exception from `run` is re-raised to the consumer.
    """
    send, receive = anyio.create_memory_object_stream[EngineEvent | TokenStreamed | ConvergeResult](
        buffer
    )
    where: list[EngineEvent] = []

    class Channel:
        async def on_event(self, event: EngineEvent, /) -> None:
            where[:] = (event,)
            await send.send(event)

    async def forward(suggestor: str, call: int, attempt: int, text: str, /) -> None:
        last = where[0] if where else None
        run_id, cycle = ("", 0) if last is None else (last.run_id, last.cycle)
        token = TokenStreamed(
            run_id=run_id, cycle=cycle, suggestor=suggestor, call=call, attempt=attempt, text=text
        )
        await send.send(token)

    forwarding = replace(config, observers=(*config.observers, Channel()))
    failure: list[BaseException] = []

    async def produce() -> None:
        if tokens:
            tokens_to(forward)  # this task's and those it starts: the run's suggestors' calls
        try:
            async with send:
                result = await run(forwarding)
                await send.send(result)
        except anyio.BrokenResourceError:  # the consumer went away
            pass
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # re-raised to the consumer as `run` would raise it
            # a `KeyboardInterrupt` a suggestor raised too: out of this task, asyncio would
            # let it escape the event loop
            failure.append(error)

    closed = False
    async with anyio.create_task_group() as group:
        group.start_soon(produce)
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
