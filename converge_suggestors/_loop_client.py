"""An `httpx.AsyncClient` bound to the event loop that made it, and closed before it ends.

A client's connections belong to the event loop they were opened in: reused from another loop
(a later `anyio.run` or `Engine.run_sync`) they fail with "Event loop is closed", and left open
when their loop ends they are never closed cleanly. So each client lives in one loop: a
background task of that loop closes it when the loop shuts down (asyncio cancels leftover
tasks, trio cancels system tasks), and a call from another loop gets a new client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

import anyio
import anyio.lowlevel

from converge import get_logger

if TYPE_CHECKING:
    import asyncio  # noqa: TID251  # the type of the task asyncio makes, only

    import httpx

__all__ = ["LoopBoundClient"]

_CLOSERS: set[asyncio.Task[None]] = set()
"""The closers of every live client: asyncio holds only weak references to its tasks, and a
closer collected with its provider while its loop runs would run its `finally` wherever the
collector happened to be, breaking that task's cancel scopes."""


@final
class LoopBoundClient:
    """One client per event loop, made by `factory` on first use in that loop."""

    __slots__ = ("_client", "_closed", "_factory", "_loop", "_task")

    def __init__(self, factory: Callable[[], httpx.AsyncClient]) -> None:
        self._factory = factory
        self._client: httpx.AsyncClient | None = None
        self._loop: object = None
        self._closed: anyio.Event | None = None
        self._task: object = None  # asyncio holds only weak references to its tasks

    def get(self) -> httpx.AsyncClient:
        """The running loop's client, made (and its closer started) if there is none yet."""
        loop = anyio.lowlevel.current_token().native_token
        client = self._client
        if client is not None and self._loop is loop and not client.is_closed:
            return client
        # A client of another loop is left to that loop's closer (it cannot be closed here).
        client = self._factory()
        closed = anyio.Event()
        self._client, self._loop, self._closed = client, loop, closed
        create_task = getattr(loop, "create_task", None)
        if create_task is not None:  # asyncio (or a loop like it, such as uvloop)
            task: asyncio.Task[None] = create_task(_close_at_end(client, closed))
            _CLOSERS.add(task)
            task.add_done_callback(_CLOSERS.discard)
            self._task = task
        else:  # trio: a system task, cancelled when the main task exits
            import trio.lowlevel

            trio.lowlevel.spawn_system_task(_close_at_end, client, closed)
        return client

    async def aclose(self) -> None:
        """Close the client now, if the running loop owns it; a later `get` makes a new one."""
        client, closed, loop = self._client, self._closed, self._loop
        self._client = self._closed = self._loop = self._task = None
        if client is None or closed is None:
            return
        if loop is anyio.lowlevel.current_token().native_token:
            await client.aclose()
            closed.set()


async def _close_at_end(client: httpx.AsyncClient, closed: anyio.Event) -> None:
    """Wait until the client is closed or the loop shuts down (cancelling this); close it."""
    try:
        await closed.wait()
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await client.aclose()
            except Exception:  # a closer must not fail its loop's shutdown
                get_logger().debug("provider_client_close_failed", exc_info=True)
